"""Telemetry of actors: OpenTelemetry spans (``traced``, ``span``, endpoints
made with ``instrument=True``) and metrics (``get_meter``) on the
OpenTelemetry API, the ``[actor=...]`` prefix of Python log records emitted
inside actors, and the OpenTelemetry SDK that each process sets up when the
settings ``otel_tracing`` / ``otel_metrics`` (``ENABLE_OTEL_TRACING`` /
``ENABLE_OTEL_METRICS``) ask for it.

Until a tracer provider is set in the process (by the program itself or by
those settings), a span costs one check: ``span`` hands out a shared no-op.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import importlib
import inspect
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import Status, StatusCode
from opentelemetry.util.types import AttributeValue

import monarch_actor.config as switches  # the module itself: its attributes are read live

from .._core.config import otel_metrics, otel_tracing
from .._core.current import current
from . import otlp
from .span_recorder import SharedAttributes, SpanRecorder

if TYPE_CHECKING:
    from .._core.router import Runtime

__all__ = [
    "active_tracer",
    "actor_attributes",
    "enter_span",
    "flush_telemetry",
    "get_meter",
    "install_log_prefix",
    "instrumented",
    "leave_span",
    "span",
    "start_telemetry",
    "traced",
    "tracing_active",
]

P = ParamSpec("P")
R = TypeVar("R")

log = logging.getLogger("monarch.actor.telemetry")

SCOPE = "monarch"  # the instrumentation scope of our tracer and meter, as in Monarch
# spans of Monarch's tracer that wait for export at most (the SDK's default is
# 2048): an actor handles bursts of 10,000 messages a second, and a span waiting costs
# a few hundred bytes
QUEUED_SPANS = 16384
# spans per export request at most (the SDK's default is 512): a request costs the
# sender and the collector far more than a span in it
BATCHED_SPANS = 4096
FLUSH_TIMEOUT = 3.0  # seconds a stopping proc gives its exporters before it exits

_meter = metrics.get_meter(SCOPE)  # a proxy: it and its instruments follow the provider once set
_HOST = socket.gethostname()

# -- spans ------------------------------------------------------------------------------

_tracer: trace.Tracer | None = None  # the global provider's, once one is set (it stays)
_UNKNOWN = object()
_PROVIDER_FROM_ENV = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
_recorder: SpanRecorder | None = None  # Monarch's own, once ENABLE_OTEL_TRACING set it up


def active_tracer() -> trace.Tracer | None:
    """The tracer spans are made with: Monarch's own exporting recorder
    where ``ENABLE_OTEL_TRACING`` set one up, else the global tracer
    provider's once one is set in this process; ``None`` until then (spans
    are then skipped)."""
    global _tracer
    tracer = _recorder or _tracer
    if tracer is not None:
        return tracer
    # Until a provider is set, this runs around every endpoint call: the API's
    # own global says "none yet" in one read, where ``get_tracer_provider``
    # looks the environment up each time (0.6 µs). A provider named by the
    # environment is loaded by ``get_tracer_provider``, which sets that global.
    if getattr(trace, "_TRACER_PROVIDER", _UNKNOWN) is None and not _PROVIDER_FROM_ENV:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):
        return None
    # the provider's own tracer, not the API's proxy: a proxy costs a
    # delegation and a second context manager per span
    tracer = _tracer = provider.get_tracer(SCOPE)
    return tracer


def tracing_active() -> bool:
    """Whether a global tracer provider is set in this process (spans are made)."""
    return active_tracer() is not None


def actor_attributes() -> dict[str, AttributeValue]:
    """The running actor's identity as span attributes; empty outside actors.

    Returns:
        ``monarch.actor.name`` (its mesh's name), ``monarch.actor.class``,
        ``monarch.actor.id``, ``monarch.actor.rank`` (its rank in its mesh),
        ``monarch.actor.point`` (its coordinates), ``monarch.proc`` (its
        process's address) and ``monarch.host`` (the host's name). The dict
        is shared: copy it before changing it.
    """
    ctx = current()
    if ctx is None:
        return {}
    instance = ctx.actor_instance
    found: SharedAttributes | None = instance._span_attributes
    if found is None:
        point = instance.rank
        found = SharedAttributes(
            {
                "monarch.actor.name": instance.name,
                "monarch.actor.class": instance.class_name,
                "monarch.actor.id": instance.actor_id,
                "monarch.actor.rank": point.rank,
                "monarch.actor.point": ",".join(f"{k}={v}" for k, v in point.items()),
                "monarch.proc": instance.proc_id,
                "monarch.host": _HOST,
            }
        )
        instance._span_attributes = found
    return found


def enter_span(
    tracer: trace.Tracer, name: str, attributes: Mapping[str, AttributeValue] | None = None
) -> tuple[trace.Span, object]:
    """Start a span with the running actor's attributes and make it the current one.

    Returns:
        The span and the token ``leave_span`` needs.
    """
    merged = actor_attributes()
    if attributes:
        merged = {**merged, **attributes}
    started = tracer.start_span(name, attributes=merged)
    return started, otel_context.attach(trace.set_span_in_context(started))


def leave_span(started: trace.Span, token: object, error: BaseException | None) -> None:
    """End a span from ``enter_span``; an ``Exception`` that left it is recorded
    on it and sets its status (as OpenTelemetry's own ``use_span`` does)."""
    otel_context.detach(token)  # type: ignore[arg-type]
    if isinstance(error, Exception) and started.is_recording():
        started.record_exception(error)
        started.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
    started.end()


class _Span:
    """What ``span()`` returns once spans are made: a span entered as the current one."""

    __slots__ = ("_attributes", "_name", "_started", "_token", "_tracer")

    def __init__(
        self, tracer: trace.Tracer, name: str, attributes: Mapping[str, AttributeValue] | None
    ) -> None:
        self._tracer = tracer
        self._name = name
        self._attributes = attributes
        self._started: trace.Span = trace.INVALID_SPAN
        self._token: object = None

    def __enter__(self) -> trace.Span:
        self._started, self._token = enter_span(self._tracer, self._name, self._attributes)
        return self._started

    def __exit__(self, kind: object, error: BaseException | None, tb: object) -> None:
        leave_span(self._started, self._token, error)


_NO_SPAN: contextlib.nullcontext[trace.Span] = contextlib.nullcontext(trace.INVALID_SPAN)


def span(
    name: str, attributes: Mapping[str, AttributeValue] | None = None
) -> contextlib.AbstractContextManager[trace.Span]:
    """Time a block of code as an OpenTelemetry span.

    The span is the current one inside the block (spans started there are
    its children) and, inside an actor, carries the actor's identity as
    attributes (see ``traced``). An exception leaving the block is recorded
    on the span. Until a tracer provider is set in the process (by the
    program, or by ``ENABLE_OTEL_TRACING``), the span is a shared no-op.

    Args:
        name: the span's name.
        attributes: more attributes for the span.

    Returns:
        A context manager whose ``with`` gives the ``opentelemetry.trace.Span``.

    Raises:
        TypeError: ``name`` is not a string.
        ValueError: ``name`` is empty.

    Examples:
        >>> from monarch_actor import span
        >>> with span("load_batch") as s:
        ...     s.set_attribute("batch.size", 32)
    """
    _check_name(name, "span")
    tracer = active_tracer()
    if tracer is None:
        return _NO_SPAN
    return _Span(tracer, name, attributes)


def _check_name(name: object, what: str) -> None:
    if not isinstance(name, str):
        raise TypeError(f"{what}() takes the span's name as a str, got {type(name).__name__}")
    if not name:
        raise ValueError(f"{what}() needs a non-empty span name")


@overload
def traced(fn: Callable[P, R], /) -> Callable[P, R]: ...
@overload
def traced(*, name: str | None = None) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
def traced(fn: Callable[..., Any] | None = None, /, *, name: str | None = None) -> Any:
    """Run each call of a function inside a span (``@traced`` or ``@traced(name=...)``).

    Works on plain and ``async`` functions. Inside an actor the span carries
    the actor's identity as attributes: ``monarch.actor.name``,
    ``monarch.actor.class``, ``monarch.actor.id``, ``monarch.actor.rank``,
    ``monarch.actor.point``, ``monarch.proc`` and ``monarch.host``. Spans are
    exported where the process has an OpenTelemetry SDK set up: its own, or
    the one ``ENABLE_OTEL_TRACING`` sets up.

    Args:
        fn: the function, when used bare.
        name: the span's name; the function's ``__name__`` when not given.

    Returns:
        The wrapped function; with ``fn`` omitted, a decorator that wraps one.

    Raises:
        TypeError: what is decorated is not callable or is a generator
            function, or ``name`` is not a string (the name goes in
            ``name=``: ``@traced(name="load")``).
        ValueError: ``name`` is empty.

    Examples:
        >>> from monarch_actor import traced
        >>> @traced
        ... def tokenize(text: str) -> list[str]:
        ...     return text.split()
        >>> @traced(name="fetch_weights")
        ... async def fetch() -> bytes:
        ...     return b""
        >>> tokenize("a b")
        ['a', 'b']
    """
    if fn is not None and not callable(fn):
        raise TypeError(
            f"traced takes a function, got {type(fn).__name__} {fn!r} (give a span name as "
            "@traced(name=...))"
        )
    if name is not None:
        _check_name(name, "traced")

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(function):
            raise TypeError(f"@traced decorates a function, not {type(function).__name__}")
        if inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function):
            raise TypeError(
                f"@traced cannot time the generator {function.__qualname__} across its "
                "yields; use `with span(...)` inside it instead"
            )
        label = name or getattr(function, "__name__", None) or type(function).__name__
        return _wrap(function, label)

    return decorate if fn is None else decorate(fn)


def instrumented(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` run inside a span named after it, for ``@endpoint(instrument=True)``."""
    return _wrap(method, method.__name__)


def _wrap(function: Callable[..., Any], label: str) -> Callable[..., Any]:
    # The wrappers name only functions of this module, no variables: a class
    # that travels by value (cloudpickle) takes functions by reference, so
    # they keep reading this process's state. The span is entered inline,
    # without a context manager: this runs around every endpoint call.
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            tracer = active_tracer()
            if tracer is None:
                return await function(*args, **kwargs)
            started, token = enter_span(tracer, label)
            error: BaseException | None = None
            try:
                return await function(*args, **kwargs)
            except BaseException as raised:
                error = raised
                raise
            finally:
                leave_span(started, token, error)

        return run_async

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        tracer = active_tracer()
        if tracer is None:
            return function(*args, **kwargs)
        started, token = enter_span(tracer, label)
        error: BaseException | None = None
        try:
            return function(*args, **kwargs)
        except BaseException as raised:
            error = raised
            raise
        finally:
            leave_span(started, token, error)

    return run


# -- metrics ----------------------------------------------------------------------------


def get_meter() -> metrics.Meter:
    """Monarch's process-global OpenTelemetry meter.

    Instruments made from it record nothing until a meter provider is set
    in the process (by the program, or by ``ENABLE_OTEL_METRICS``); those
    made before then start recording once one is.

    Returns:
        The meter of the instrumentation scope ``monarch``.

    Examples:
        >>> from monarch_actor import get_meter
        >>> steps = get_meter().create_counter("train.steps")
        >>> steps.add(1, {"phase": "warmup"})
    """
    return _meter


# -- the log prefix ---------------------------------------------------------------------


class _ActorPrefix(logging.Filter):
    """Puts ``[actor=<the running actor>] `` before the message of a record
    emitted inside an actor. It sits on every handler, so the first handler
    that sees the record prefixes it (on the emitting thread, where the
    actor is known) and the others find it done."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "actor_prefix" in record.__dict__:
            return True
        try:
            if not switches.prefix_python_logs_with_actor:
                return True
            ctx = current()
            if ctx is None:
                return True
            prefix = f"[actor={ctx.actor_instance!r}] "
            record.actor_prefix = prefix
            # an empty message stays empty: torch.compile's structured trace
            # records require it
            if record.msg:
                record.msg = f"{prefix}{record.msg}"
        except Exception as error:  # a failing prefix must not lose the record
            record.actor_prefix = ""
            log.debug("could not prefix a log record with its actor: %r", error)
        return True


_FILTER = _ActorPrefix()
_prefix_lock = threading.Lock()
_prefix_installed = False


def install_log_prefix() -> None:
    """Put the actor prefix filter on every logging handler of this process:
    those that exist now (every logger's and ``logging.lastResort``, which
    prints records no handler took) and every one added later with
    ``Logger.addHandler`` (``basicConfig``, ``dictConfig``, pytest's)."""
    global _prefix_installed
    with _prefix_lock:
        if _prefix_installed:
            return
        _prefix_installed = True
        loggers: list[Any] = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
        for logger in loggers:
            for handler in list(getattr(logger, "handlers", ())):  # placeholders have none
                handler.addFilter(_FILTER)
        if logging.lastResort is not None:
            logging.lastResort.addFilter(_FILTER)
        add_handler = logging.Logger.addHandler

        @functools.wraps(add_handler)
        def add_handler_prefixing(self: logging.Logger, hdlr: logging.Handler) -> None:
            add_handler(self, hdlr)
            hdlr.addFilter(_FILTER)  # a no-op when the handler has it already

        setattr(logging.Logger, "addHandler", add_handler_prefixing)  # noqa: B010


# -- the SDK of each process ------------------------------------------------------------

_EXPORTERS = {
    ("traces", "grpc"): (
        "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
        "OTLPSpanExporter",
    ),
    ("traces", "http/protobuf"): (
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        "OTLPSpanExporter",
    ),
    ("metrics", "grpc"): (
        "opentelemetry.exporter.otlp.proto.grpc.metric_exporter",
        "OTLPMetricExporter",
    ),
    ("metrics", "http/protobuf"): (
        "opentelemetry.exporter.otlp.proto.http.metric_exporter",
        "OTLPMetricExporter",
    ),
}
_INSTALL_HINT = "pip install 'monarch-actor[otel]'"
_background: set[asyncio.Task[None]] = set()


def start_telemetry(runtime: Runtime) -> None:
    """What telemetry a process starts with (called as its runtime is wired):
    the log prefix everywhere; in the controller and in procs, the SDK's
    providers the settings ask for; in procs, a flush of the exporters when
    the proc stops (a proc ends with ``os._exit``, past the SDK's own
    exit hooks)."""
    install_log_prefix()
    if runtime.role not in ("controller", "proc"):
        return  # a worker's host process runs no actors
    where = f"{runtime.role} {runtime.address} (pid {os.getpid()}, host {_HOST})"
    for wanted, provide, setting in (
        (otel_tracing, _provide_tracing, "ENABLE_OTEL_TRACING"),
        (otel_metrics, _provide_metrics, "ENABLE_OTEL_METRICS"),
    ):
        if not wanted():
            continue
        try:
            provide(runtime.role, where)
        except Exception as error:  # a bad OTEL_* variable must not stop the process
            log.warning(
                "%s is on in %s, but OpenTelemetry could not be set up: %s: %s (check the "
                "OTEL_* environment variables); it runs without it",
                setting,
                where,
                type(error).__name__,
                error,
            )
    if runtime.role == "proc":
        task = runtime.loop.create_task(_flush_when_stopped(runtime))
        _background.add(task)
        task.add_done_callback(_background.discard)


async def _flush_when_stopped(runtime: Runtime) -> None:
    await runtime.stopped.wait()
    # on the loop, on purpose: the proc exits once its loop is done, so the
    # exporters get their time before that
    flush_telemetry(FLUSH_TIMEOUT)


def flush_telemetry(timeout: float) -> None:
    """Export what the global tracer and meter providers hold, within ``timeout`` seconds.

    Args:
        timeout: seconds for all of it; providers without ``force_flush``
            (the API's no-ops) are skipped.
    """
    deadline = time.monotonic() + timeout
    if _recorder is not None:
        _recorder.flush(timeout)
    for provider in (trace.get_tracer_provider(), metrics.get_meter_provider()):
        flush = getattr(provider, "force_flush", None)
        if flush is None:
            continue
        left = max(0.0, deadline - time.monotonic())
        try:
            flush(timeout_millis=int(left * 1000))
        except Exception as error:
            log.warning("flushing the telemetry of %s failed: %s", type(provider).__name__, error)


def _resource(role: str) -> Any:
    from opentelemetry.sdk.resources import Resource

    attributes: dict[str, AttributeValue] = {
        "monarch.process.role": role,
        "process.pid": os.getpid(),
        "host.name": _HOST,
    }
    named = "OTEL_SERVICE_NAME" in os.environ or "service.name=" in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    if not named:
        attributes["service.name"] = "monarch"
    return Resource.create(attributes)


def _exporter(signal: str, setting: str, where: str) -> tuple[Any, str] | None:
    """The OTLP exporter of ``signal`` (``"traces"``/``"metrics"``) and its
    protocol, the one the standard variables name (gRPC unless told
    otherwise, as in OpenTelemetry's SDK); ``None`` after a warning when it
    cannot be made."""
    chosen = (
        os.environ.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or ""
    ).strip()
    protocols = [chosen] if chosen else ["grpc", "http/protobuf"]
    for protocol in protocols:
        found = _EXPORTERS.get((signal, protocol))
        if found is None:
            log.warning(
                "%s is on in %s, but the OTLP protocol %r is not supported: set "
                "OTEL_EXPORTER_OTLP_PROTOCOL to grpc or http/protobuf",
                setting,
                where,
                protocol,
            )
            return None
        module, name = found
        try:
            exporter_class = getattr(importlib.import_module(module), name)
        except ImportError:
            continue
        return exporter_class(), protocol
    log.warning(
        "%s is on in %s, but no OTLP exporter for %s is installed: %s",
        setting,
        where,
        " or ".join(protocols),
        _INSTALL_HINT,
    )
    return None


def _provide_tracing(role: str, where: str) -> None:
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        log.debug("%s: the program set its own tracer provider; it is left alone", where)
        return
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "ENABLE_OTEL_TRACING is on in %s, but opentelemetry-sdk is not installed: %s",
            where,
            _INSTALL_HINT,
        )
        return
    made = _exporter("traces", "ENABLE_OTEL_TRACING", where)
    if made is None:
        return
    exporter, protocol = made
    provider = TracerProvider(resource=_resource(role))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    _record_spans(provider, protocol, role)


def _record_spans(provider: Any, protocol: str, role: str) -> None:
    """Monarch's own spans go through a ``SpanRecorder`` that sends to the
    same collector as the SDK's exporter, with the provider's sampler, id
    generator and resource."""
    global _recorder
    from opentelemetry.sdk.trace import sampling

    def seconds(name: str, default: float) -> float:
        try:
            return float(os.environ.get(name, "")) / 1000
        except ValueError:
            return default

    def count(name: str, default: int) -> int:
        try:
            return int(os.environ.get(name, ""))
        except ValueError:
            return default

    try:
        send = otlp.sender(otlp.OtlpSettings.from_environment(protocol))
    except ValueError as error:
        log.warning("ENABLE_OTEL_TRACING is on, but Monarch's spans cannot be exported: %s", error)
        return
    sampler = provider.sampler
    _recorder = SpanRecorder(
        sampler=None if sampler is sampling.DEFAULT_ON else sampler,
        id_generator=provider.id_generator,
        resource=dict(provider.resource.attributes),
        send=send,
        scope=SCOPE,
        batch=count("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", BATCHED_SPANS),
        queue=count("OTEL_BSP_MAX_QUEUE_SIZE", QUEUED_SPANS),
        delay=seconds("OTEL_BSP_SCHEDULE_DELAY", 5.0),
    )
    if role == "controller":  # a proc flushes as it stops (``start_telemetry``)
        atexit.register(_recorder.shutdown, FLUSH_TIMEOUT)


def _provide_metrics(role: str, where: str) -> None:
    # the API has no public name for "no provider yet": its stand-in is a proxy
    if type(metrics.get_meter_provider()).__name__ != "_ProxyMeterProvider":
        log.debug("%s: the program set its own meter provider; it is left alone", where)
        return
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    except ImportError:
        log.warning(
            "ENABLE_OTEL_METRICS is on in %s, but opentelemetry-sdk is not installed: %s",
            where,
            _INSTALL_HINT,
        )
        return
    made = _exporter("metrics", "ENABLE_OTEL_METRICS", where)
    if made is None:
        return
    exporter, _ = made
    reader = PeriodicExportingMetricReader(exporter)  # OTEL_METRIC_EXPORT_INTERVAL applies
    metrics.set_meter_provider(MeterProvider(resource=_resource(role), metric_readers=[reader]))
