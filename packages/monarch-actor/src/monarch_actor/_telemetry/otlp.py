"""OTLP for the spans Monarch records itself: the protobuf encoding of an
``ExportTraceServiceRequest`` and the senders that deliver it to a collector
over OTLP/HTTP or OTLP/gRPC, configured by OpenTelemetry's standard
``OTEL_EXPORTER_OTLP_*`` variables.

Why not the SDK's exporters: they encode span by span through the protobuf
message classes, 20 µs and more per span here, more than handling the message
the span times. A span of ours is a fixed head (ids, times, flags) packed by
``struct`` and a tail (name, kind, attributes) that is the same for every
call of one endpoint of one actor, so it is encoded once and reused; events,
status and links, rare, follow it. Protobuf lets a message be written as the
concatenation of its fields in any order.
"""

from __future__ import annotations

import gzip
import http
import logging
import os
import ssl
import struct
import time
import urllib.parse
import zlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, Protocol

__all__ = [
    "Encoded",
    "OtlpSettings",
    "SharedAttributes",
    "SpanRecord",
    "encode_request",
    "encode_span",
    "sender",
]

log = logging.getLogger("monarch.actor.telemetry")

# -- protobuf wire format ---------------------------------------------------------------

_LEN, _I64, _I32, _VARINT = 2, 1, 5, 0
_MASK64 = (1 << 64) - 1


def _varint(n: int) -> bytes:
    n &= _MASK64  # an int64 below zero is sent as its two's complement
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _tag(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _bytes_field(field: int, payload: bytes) -> bytes:
    return _tag(field, _LEN) + _varint(len(payload)) + payload


def _string_field(field: int, text: str) -> bytes:
    return _bytes_field(field, text.encode("utf-8", "replace"))


def _any_value(value: Any) -> bytes:
    # AnyValue: string_value 1, bool_value 2, int_value 3, double_value 4,
    # array_value 5 (ArrayValue: values 1), bytes_value 7
    if isinstance(value, str):
        return _string_field(1, value)
    if isinstance(value, bool):
        return _tag(2, _VARINT) + _varint(int(value))
    if isinstance(value, int):
        return _tag(3, _VARINT) + _varint(value)
    if isinstance(value, float):
        return _tag(4, _I64) + struct.pack("<d", value)
    if isinstance(value, bytes | bytearray):
        return _bytes_field(7, bytes(value))
    items = b"".join(_bytes_field(1, _any_value(item)) for item in value)
    return _bytes_field(5, items)


def _attributes(field: int, attributes: Mapping[str, Any]) -> bytes:
    # KeyValue: key 1, value 2
    return b"".join(
        _bytes_field(field, _string_field(1, key) + _bytes_field(2, _any_value(value)))
        for key, value in attributes.items()
    )


# -- spans ------------------------------------------------------------------------------


class Encoded(NamedTuple):
    """A link or an event of a span, as it travels."""

    field: int
    payload: bytes


class SpanRecord(Protocol):
    """What the encoder reads of a finished span."""

    name: str
    kind: int  # OTLP's SpanKind: the API's SpanKind value + 1
    trace_id: int
    span_id: int
    parent_id: int | None
    parent_remote: bool
    start_time: int
    end_time: int
    attributes: Mapping[str, Any]
    extras: list[Encoded] | None  # its events and links, encoded as they came
    status: tuple[int, str] | None  # (OTLP status code, message)


_IDS = struct.Struct(">BBQQBBQ")  # trace_id 1, span_id 2: big-endian bytes
# a span's head: trace_id 1, span_id 2 (and parent_span_id 4), start 7 and
# end 8 (fixed64), flags 16 (fixed32)
_HEAD = struct.Struct("<BB16sBB8sBQBQ2sI")
_HEAD_WITH_PARENT = struct.Struct("<BB16sBB8sBB8sBQBQ2sI")
_FLAGS_TAG = _tag(16, _I32)
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200
_T7, _T8 = (7 << 3) | _I64, (8 << 3) | _I64
_SPAN_FIELD = _tag(2, _LEN)  # ScopeSpans.spans


class SharedAttributes(dict[str, Any]):
    """Span attributes that are valid and never change once made (an actor's
    identity): spans keep them by reference, and the encoder encodes them
    once for all the spans of one name that carry them."""

    __slots__ = ()


# what recent spans of one (name, kind, SharedAttributes) share: endpoint spans
# carry their actor's one attribute dict, so a busy actor's are encoded once
_SHARED_KEPT = 4096


class _Shared(NamedTuple):
    attributes: Mapping[str, Any]  # kept: its id is part of the key
    tail: bytes  # name 5, kind 6, attributes 9
    prefix: bytes  # the field's tag and length, for a span with no parent, no extras
    prefix_with_parent: bytes  # and with a parent


_shared: dict[tuple[str, int, int], _Shared] = {}


def _length_prefix(size: int) -> bytes:
    return _SPAN_FIELD + _varint(size)


def _shared_of(record: SpanRecord) -> _Shared:
    attributes = record.attributes
    shared = type(attributes) is SharedAttributes
    if shared:
        key = (record.name, record.kind, id(attributes))
        found = _shared.get(key)
        if found is not None and found.attributes is attributes:
            return found
    tail = _string_field(5, record.name) + _tag(6, _VARINT) + _varint(record.kind)
    tail += _attributes(9, attributes)
    found = _Shared(
        attributes,
        tail,
        _length_prefix(_HEAD.size + len(tail)),
        _length_prefix(_HEAD_WITH_PARENT.size + len(tail)),
    )
    if shared:  # a span's own attributes are its alone: nothing to keep
        if len(_shared) >= _SHARED_KEPT:
            _shared.clear()
        _shared[key] = found
    return found


def encode_span(record: SpanRecord) -> bytes:
    """One span as a ``ScopeSpans.spans`` field (tag, length, message)."""
    shared = _shared_of(record)
    trace_id = record.trace_id.to_bytes(16, "big")
    span_id = record.span_id.to_bytes(8, "big")
    parent_id = record.parent_id
    if parent_id is None:
        prefix = shared.prefix
        head = _HEAD.pack(
            0x0A, 16, trace_id, 0x12, 8, span_id,
            _T7, record.start_time, _T8, record.end_time, _FLAGS_TAG, _HAS_IS_REMOTE,
        )  # fmt: skip
    else:
        prefix = shared.prefix_with_parent
        flags = _HAS_IS_REMOTE | (_IS_REMOTE if record.parent_remote else 0)
        head = _HEAD_WITH_PARENT.pack(
            0x0A, 16, trace_id, 0x12, 8, span_id, 0x22, 8, parent_id.to_bytes(8, "big"),
            _T7, record.start_time, _T8, record.end_time, _FLAGS_TAG, flags,
        )  # fmt: skip
    if not record.extras and record.status is None:  # an endpoint's span, as a rule
        return prefix + head + shared.tail
    tail = shared.tail
    if record.extras:
        tail += b"".join(_bytes_field(field, payload) for field, payload in record.extras)
    if record.status is not None:
        code, message = record.status
        status = _string_field(2, message) if message else b""
        tail += _bytes_field(15, status + _tag(3, _VARINT) + _varint(code))
    body = head + tail
    return _length_prefix(len(body)) + body


def encode_event(name: str, at: int, attributes: Mapping[str, Any]) -> Encoded:
    """An event of a span (``Span.events``: time 1, name 2, attributes 3)."""
    payload = struct.pack("<BQ", (1 << 3) | _I64, at) + _string_field(2, name)
    return Encoded(11, payload + _attributes(3, attributes))


def encode_link(
    trace_id: int, span_id: int, remote: bool, attributes: Mapping[str, Any]
) -> Encoded:
    """A link of a span (``Span.links``: trace_id 1, span_id 2, attributes 4, flags 6)."""
    payload = _IDS.pack(0x0A, 16, trace_id >> 64, trace_id & _MASK64, 0x12, 8, span_id)
    flags = _HAS_IS_REMOTE | (_IS_REMOTE if remote else 0)
    payload += _attributes(4, attributes) + struct.pack("<BI", (6 << 3) | _I32, flags)
    return Encoded(13, payload)


def encode_request(
    resource: Mapping[str, Any], scope: str, spans: Iterable[bytes], version: str = ""
) -> bytes:
    """An ``ExportTraceServiceRequest`` of one resource and one scope.

    Args:
        resource: the resource's attributes.
        scope: the instrumentation scope's name.
        spans: spans from ``encode_span``.
        version: the scope's version.
    """
    scope_message = _string_field(1, scope) + (_string_field(2, version) if version else b"")
    scope_spans = _bytes_field(1, scope_message) + b"".join(spans)
    resource_spans = _bytes_field(1, _attributes(1, resource)) + _bytes_field(2, scope_spans)
    return _bytes_field(1, resource_spans)


# -- delivery ---------------------------------------------------------------------------

_GRPC_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
_RETRY_HTTP = {408, 429, 502, 503, 504}
_PHRASES = {status.value for status in http.HTTPStatus}
_RETRY_GRPC = {"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED"}


def _env(name: str, default: str = "") -> str:
    """``OTEL_EXPORTER_OTLP_TRACES_<name>``, else ``OTEL_EXPORTER_OTLP_<name>``."""
    return (
        os.environ.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}")
        or os.environ.get(f"OTEL_EXPORTER_OTLP_{name}")
        or default
    ).strip()


class OtlpSettings(NamedTuple):
    """Where and how spans are sent, from the standard OTLP variables."""

    protocol: str  # "grpc" or "http/protobuf"
    endpoint: str
    headers: dict[str, str]
    timeout: float  # seconds per export, retries included
    compression: str  # "", "gzip" or "deflate"
    certificate: str
    client_key: str
    client_certificate: str
    insecure: bool

    @classmethod
    def from_environment(cls, protocol: str) -> OtlpSettings:
        """The settings the variables give, for ``protocol``."""
        headers = {}
        for pair in _env("HEADERS").split(","):
            key, _, value = pair.partition("=")
            if key.strip():
                headers[urllib.parse.unquote(key.strip()).lower()] = urllib.parse.unquote(
                    value.strip()
                )
        timeout_text = _env("TIMEOUT", "10")
        try:
            timeout = float(timeout_text)  # seconds, as OpenTelemetry's Python SDK reads it
        except ValueError:
            log.warning("OTEL_EXPORTER_OTLP_TIMEOUT=%r is no number; 10 s it is", timeout_text)
            timeout = 10.0
        own_endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        endpoint = own_endpoint
        if protocol == "http/protobuf":
            if not endpoint:
                base = _env("ENDPOINT", "http://localhost:4318").rstrip("/")
                endpoint = f"{base}/v1/traces"
        elif not endpoint:
            endpoint = _env("ENDPOINT", "http://localhost:4317")
        return cls(
            protocol=protocol,
            endpoint=endpoint,
            headers=headers,
            timeout=timeout,
            compression=_env("COMPRESSION", "none").lower().replace("none", ""),
            certificate=_env("CERTIFICATE"),
            client_key=_env("CLIENT_KEY"),
            client_certificate=_env("CLIENT_CERTIFICATE"),
            insecure=_env("INSECURE", "false").lower() == "true",
        )


Send = Callable[[bytes, float | None], bool]  # (request, seconds it may take at most)


def sender(settings: OtlpSettings) -> Send:
    """A function that delivers one encoded request, retrying what a
    collector says may pass later, within ``settings.timeout`` or the
    seconds it is given when fewer, and says whether it got through (a
    failure is logged, never raised)."""
    if settings.protocol == "grpc":
        return _grpc_sender(settings)
    return _http_sender(settings)


def _seconds(timeout: float, within: float | None) -> float:
    return timeout if within is None else min(timeout, within)


def _backoff(attempt: int, deadline: float) -> bool:
    """Sleep before retry ``attempt``; False when the deadline leaves no time."""
    pause = min(2.0**attempt * 0.5, 8.0)
    if time.monotonic() + pause >= deadline:
        return False
    time.sleep(pause)
    return True


def _http_sender(settings: OtlpSettings) -> Send:
    import http.client  # here: with the email parser it loads, ~8 ms of every process's start

    url = urllib.parse.urlsplit(settings.endpoint)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(
            f"the OTLP/HTTP endpoint {settings.endpoint!r} is no http:// or https:// URL "
            "(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT)"
        )
    host: str = url.hostname
    path = url.path or "/"
    if url.query:
        path += f"?{url.query}"
    context: ssl.SSLContext | None = None
    if url.scheme == "https":
        context = ssl.create_default_context(cafile=settings.certificate or None)
        if settings.client_certificate:
            context.load_cert_chain(settings.client_certificate, settings.client_key or None)
    headers = {"Content-Type": "application/x-protobuf", **settings.headers}
    compress: Callable[[bytes], bytes] | None = None
    if settings.compression == "gzip":
        compress = gzip.compress
        headers["Content-Encoding"] = "gzip"
    elif settings.compression == "deflate":
        compress = zlib.compress
        headers["Content-Encoding"] = "deflate"
    # one connection, kept open between exports: opening one per export cost
    # more than encoding its spans
    connection: list[http.client.HTTPConnection] = []

    def post(data: bytes, timeout: float) -> int:
        if not connection:
            if context is None:
                made = http.client.HTTPConnection(host, url.port, timeout=timeout)
            else:
                made = http.client.HTTPSConnection(host, url.port, timeout=timeout, context=context)
            connection.append(made)
        current = connection[0]
        current.timeout = timeout
        try:
            current.request("POST", path, body=data, headers=headers)
            answer = current.getresponse()
            answer.read()
        except BaseException:
            current.close()
            connection.clear()
            raise
        if answer.will_close:
            current.close()
            connection.clear()
        return answer.status

    def send(body: bytes, within: float | None = None) -> bool:
        data = compress(body) if compress else body
        deadline = time.monotonic() + _seconds(settings.timeout, within)
        attempt = 0
        while True:
            try:
                status = post(data, max(0.1, deadline - time.monotonic()))
                if 200 <= status < 300:
                    return True
                retry = status in _RETRY_HTTP
                why = (
                    f"HTTP {status} {http.HTTPStatus(status).phrase if status in _PHRASES else ''}"
                )
            except (OSError, http.client.HTTPException) as error:  # refused, reset, timed out
                retry = True
                why = f"{type(error).__name__}: {error}"
            if not retry or not _backoff(attempt, deadline):
                log.warning("exporting spans to %s failed: %s", settings.endpoint, why.strip())
                return False
            attempt += 1

    return send


def _grpc_sender(settings: OtlpSettings) -> Send:
    import grpc  # type: ignore[import-untyped]

    parsed = urllib.parse.urlparse(settings.endpoint)
    if parsed.scheme in ("http", "https"):
        target = parsed.netloc
        insecure = parsed.scheme == "http"
    else:  # host:port, as the variable also allows
        target = settings.endpoint
        insecure = settings.insecure
    if insecure:
        channel = grpc.insecure_channel(target)
    else:

        def read(path: str) -> bytes | None:
            if not path:
                return None
            with open(path, "rb") as f:
                return f.read()

        credentials = grpc.ssl_channel_credentials(
            read(settings.certificate),
            read(settings.client_key),
            read(settings.client_certificate),
        )
        channel = grpc.secure_channel(target, credentials)
    export = channel.unary_unary(_GRPC_METHOD)  # no (de)serializers: bytes in, bytes out
    metadata = tuple(settings.headers.items())
    compression = grpc.Compression.Gzip if settings.compression == "gzip" else None

    def send(body: bytes, within: float | None = None) -> bool:
        deadline = time.monotonic() + _seconds(settings.timeout, within)
        attempt = 0
        while True:
            left = max(0.1, deadline - time.monotonic())
            try:
                export(body, timeout=left, metadata=metadata, compression=compression)
                return True
            except grpc.RpcError as error:
                code = error.code() if hasattr(error, "code") else None
                retry = code is not None and code.name in _RETRY_GRPC
                why = f"{code.name if code else 'error'}: {error}"
            if not retry or not _backoff(attempt, deadline):
                log.warning("exporting spans to %s failed: %s", target, why)
                return False
            attempt += 1

    return send
