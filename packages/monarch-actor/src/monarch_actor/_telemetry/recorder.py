"""The tracer of Monarch's own spans (endpoints, ``span``, ``traced``) when
``ENABLE_OTEL_TRACING`` turns tracing on: spans on OpenTelemetry's API that
cost a few microseconds each, exported in batches over OTLP by a thread of
their own.

A span of the SDK costs 10–14 µs to start and end and another 20 µs to
encode, more than the message it times; these hold only their ids, times and
a reference to their attributes while they run, and are encoded as they end
(see ``otlp``), so only bytes wait for the export thread. They
take part in OpenTelemetry's context as any span does: a span the SDK or any
other tracer starts inside one of ours is its child, and the other way round.
The sampler, id generator and resource are the SDK tracer provider's, the
one the same setting installs for everybody else's spans.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import traceback
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    INVALID_SPAN,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from opentelemetry.util.types import Attributes, AttributeValue

from .._core.threads import background_thread
from . import otlp
from .otlp import SharedAttributes

__all__ = ["RecordedSpan", "SharedAttributes", "SpanRecorder"]

log = logging.getLogger("monarch.actor.telemetry")

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
# a request stops taking spans past this size: collectors refuse large ones
# (gRPC's default limit is 4 MiB)
REQUEST_BYTES = 2 << 20
_VALUE_TYPES = (str, bool, int, float)
_MAX_EVENTS = 128  # per span, as the SDK's default limits
_STATUS_CODES = {StatusCode.UNSET: 0, StatusCode.OK: 1, StatusCode.ERROR: 2}


def _valid(value: object) -> bool:
    if isinstance(value, _VALUE_TYPES):
        return True
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return all(isinstance(item, _VALUE_TYPES) for item in value)
    return False


def _cleaned(attributes: Attributes) -> dict[str, AttributeValue]:
    """The attributes OpenTelemetry allows (a str, bool, int or float, or a
    sequence of them); others are dropped with a debug record, as the SDK does."""
    kept: dict[str, AttributeValue] = {}
    for key, value in (attributes or {}).items():
        if isinstance(key, str) and key and _valid(value):
            kept[key] = value
        else:
            log.debug("span attribute %r=%r dropped: not a valid attribute value", key, value)
    return kept


class RecordedSpan(trace.Span):
    """A span of Monarch's tracer: its ids, times and attributes, encoded
    for export when it ends."""

    __slots__ = (
        "_context",
        "_own",
        "_recorder",
        "attributes",
        "end_time",
        "extras",
        "kind",
        "name",
        "parent_id",
        "parent_remote",
        "span_id",
        "start_time",
        "status",
        "trace_id",
    )

    def __init__(
        self,
        recorder: SpanRecorder,
        name: str,
        trace_id: int,
        span_id: int,
        parent_id: int | None,
        parent_remote: bool,
        kind: int,
        attributes: Mapping[str, AttributeValue],
        own: bool,
        start: int,
    ) -> None:
        self._recorder = recorder
        self.name = name
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_id = parent_id
        self.parent_remote = parent_remote
        self.kind = kind
        self.attributes = attributes
        self._own = own  # False while ``attributes`` is the caller's (shared) mapping
        self.start_time = start
        self.end_time = 0  # until it ends
        self.extras: list[otlp.Encoded] | None = None
        self.status: tuple[int, str] | None = None
        self._context: SpanContext | None = None

    def get_span_context(self) -> SpanContext:
        found = self._context
        if found is None:
            found = self._context = SpanContext(self.trace_id, self.span_id, False, _SAMPLED)
        return found

    def is_recording(self) -> bool:
        return not self.end_time

    def _writable(self) -> dict[str, AttributeValue]:
        if not self._own:
            self.attributes = dict(self.attributes)
            self._own = True
        return self.attributes  # type: ignore[return-value]

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        if not self.end_time:
            self._writable().update(_cleaned({key: value}))

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        if not self.end_time:
            self._writable().update(_cleaned(attributes))

    def _extra(self, encoded: otlp.Encoded) -> None:
        extras = self.extras
        if extras is None:
            extras = self.extras = []
        if len(extras) < _MAX_EVENTS:
            extras.append(encoded)

    def add_event(
        self, name: str, attributes: Attributes = None, timestamp: int | None = None
    ) -> None:
        if not self.end_time:
            at = timestamp if timestamp is not None else time.time_ns()
            self._extra(otlp.encode_event(name, at, _cleaned(attributes)))

    def add_link(self, context: SpanContext, attributes: Attributes = None) -> None:
        if not self.end_time and context.is_valid:
            link = otlp.encode_link(
                context.trace_id, context.span_id, context.is_remote, _cleaned(attributes)
            )
            self._extra(link)

    def update_name(self, name: str) -> None:
        if not self.end_time:
            self.name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self.end_time:
            return
        if isinstance(status, Status):
            code, message = status.status_code, status.description or ""
        else:
            code, message = status, description or ""
        if self.status is not None and self.status[0] == _STATUS_CODES[StatusCode.OK]:
            return  # OK is final, as the specification says
        if code is StatusCode.UNSET:
            return
        self.status = (_STATUS_CODES[code], message if code is StatusCode.ERROR else "")

    def record_exception(
        self,
        exception: BaseException,
        attributes: Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        details: dict[str, AttributeValue] = {
            "exception.type": type(exception).__qualname__,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        details.update(_cleaned(attributes))
        self.add_event("exception", details, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self.end_time:
            return
        self.end_time = end_time if end_time is not None else time.time_ns()
        self._recorder.finished(self)

    def __repr__(self) -> str:
        ids = f"trace_id={self.trace_id:032x}, span_id={self.span_id:016x}"
        return f"RecordedSpan({self.name!r}, {ids})"


class SpanRecorder(trace.Tracer):
    """A tracer whose spans are ``RecordedSpan``s, exported over OTLP.

    Args:
        sampler: decides which root spans are kept (``should_sample`` of the
            SDK's samplers); ``None`` keeps a span whose parent was kept and
            every root span (the SDK's default, decided without a call).
        id_generator: ``generate_trace_id``/``generate_span_id``.
        resource: the attributes of the process's resource.
        send: delivers one encoded request (see ``otlp.sender``).
        scope: the instrumentation scope's name.
        batch: spans per request at most (``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``),
            and ``REQUEST_BYTES`` of them.
        queue: spans kept waiting at most; more are dropped and counted
            (``OTEL_BSP_MAX_QUEUE_SIZE``).
        delay: seconds between exports while fewer than ``batch`` wait
            (``OTEL_BSP_SCHEDULE_DELAY``).
    """

    def __init__(
        self,
        sampler: Any,
        id_generator: Any,
        resource: Mapping[str, AttributeValue],
        send: otlp.Send,
        scope: str = "monarch",
        batch: int = 4096,
        queue: int = 16384,
        delay: float = 5.0,
    ) -> None:
        self._sampler = sampler
        self._new_trace_id = id_generator.generate_trace_id
        self._new_span_id = id_generator.generate_span_id
        self._resource = dict(resource)
        self._send = send
        self._scope = scope
        self._batch = max(1, batch)
        self._queue_size = max(self._batch, queue)
        self._delay = delay
        self._waiting: deque[bytes] = deque()  # ended spans, encoded
        self._wake = threading.Event()
        self._exporting = threading.Lock()  # one export at a time: the thread's or a flush's
        self._closed = False
        self.dropped = 0  # spans that found the queue full
        self._thread = background_thread("monarch-span-export", self._run)
        self._thread.start()

    # -- making spans ---------------------------------------------------------------------

    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: trace._Links = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        """Start a span; a child of the span current in ``context``.

        ``attributes`` are copied, except ``SharedAttributes``: those are
        kept by reference (each actor's identity: its spans share one
        encoding of it).
        """
        parent = trace.get_current_span(context)
        if type(parent) is RecordedSpan:
            trace_id, parent_id, remote, sampled = parent.trace_id, parent.span_id, False, True
        elif parent is INVALID_SPAN:
            trace_id, parent_id, remote, sampled = self._new_trace_id(), None, False, True
        else:
            found = parent.get_span_context()
            if found.is_valid:
                trace_id, parent_id = found.trace_id, found.span_id
                remote, sampled = found.is_remote, found.trace_flags.sampled
            else:
                trace_id, parent_id, remote, sampled = self._new_trace_id(), None, False, True
        span_id = self._new_span_id()
        if self._sampler is not None:
            decision = self._sampler.should_sample(context, trace_id, name, kind, attributes, links)
            if not decision.decision.is_sampled():
                return NonRecordingSpan(SpanContext(trace_id, span_id, False, TraceFlags(0)))
        elif not sampled:
            return NonRecordingSpan(SpanContext(trace_id, span_id, False, TraceFlags(0)))
        shared = type(attributes) is SharedAttributes
        otlp_kind = 1 if kind is SpanKind.INTERNAL else kind.value + 1  # OTLP counts from 1
        recorded = RecordedSpan(
            self,
            name,
            trace_id,
            span_id,
            parent_id,
            remote,
            otlp_kind,
            attributes if shared else _cleaned(attributes),  # type: ignore[arg-type]
            not shared,
            start_time if start_time is not None else time.time_ns(),
        )
        if links:
            for link in links:
                recorded.add_link(link.context, link.attributes)
        return recorded

    @contextlib.contextmanager
    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Attributes = None,
        links: trace._Links = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[trace.Span]:
        """Start a span and make it the current one inside the ``with`` block."""
        started = self.start_span(name, context, kind, attributes, links, start_time)
        with trace.use_span(
            started,
            end_on_exit=end_on_exit,
            record_exception=record_exception,
            set_status_on_exception=set_status_on_exception,
        ) as current:
            yield current

    # -- exporting them -------------------------------------------------------------------

    def finished(self, span: RecordedSpan) -> None:
        """Queue an ended span for export (called by ``RecordedSpan.end``).

        It is encoded here, at once: bytes wait for the export thread, not
        the span, which dies young (thousands of spans waiting as objects
        cost every garbage collection meanwhile)."""
        waiting = self._waiting
        if len(waiting) >= self._queue_size:
            self.dropped += 1
            return
        try:
            waiting.append(otlp.encode_span(span))
        except Exception as error:  # a span that cannot be encoded is lost alone
            log.warning("span %r could not be encoded: %s", span.name, error)
            return
        if len(waiting) >= self._batch and not self._wake.is_set():
            self._wake.set()

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self._delay)
            self._wake.clear()
            self._export_waiting()

    def _export_waiting(self, deadline: float | None = None) -> bool:
        """Send what waits, a batch per request, each sent by ``deadline`` (a
        ``time.monotonic()`` value; the sender's own timeout when ``None``).

        Returns:
            Whether all of it got through; what a passed deadline left
            unsent stays queued.
        """
        delivered = True
        with self._exporting:
            if self.dropped:
                log.warning(
                    "%d spans were dropped: they came faster than they could be exported "
                    "(raise OTEL_BSP_MAX_QUEUE_SIZE, or sample with OTEL_TRACES_SAMPLER)",
                    self.dropped,
                )
                self.dropped = 0
            waiting = self._waiting
            while waiting:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                batch: list[bytes] = []
                size = 0
                while waiting and len(batch) < self._batch and size < REQUEST_BYTES:
                    encoded = waiting.popleft()
                    batch.append(encoded)
                    size += len(encoded)
                request = otlp.encode_request(self._resource, self._scope, batch)
                delivered = self._send(request, left) and delivered
        return delivered

    def flush(self, timeout: float | None = None) -> bool:
        """Export every ended span now, in this thread, within ``timeout``
        seconds (waiting for an export under way included; the sender's own
        timeout per request when ``None``).

        Returns:
            Whether everything was delivered in time.
        """
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        if not self._exporting.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            return False
        self._exporting.release()
        return self._export_waiting(deadline)

    def shutdown(self, timeout: float | None = None) -> bool:
        """Flush, then stop the export thread; spans ended later are dropped."""
        delivered = self.flush(timeout)
        self._closed = True
        self._wake.set()
        return delivered
