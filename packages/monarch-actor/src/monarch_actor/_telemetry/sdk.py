"""The OpenTelemetry SDK each process sets up when the settings
``otel_tracing`` / ``otel_metrics`` (``ENABLE_OTEL_TRACING`` /
``ENABLE_OTEL_METRICS``) ask for it: tracer and meter providers with OTLP
exporters chosen by OpenTelemetry's standard variables, Monarch's own span
recorder beside them, and the flush of both as a process stops."""

from __future__ import annotations

import asyncio
import atexit
import importlib
import logging
import os
import socket
import time
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics, trace
from opentelemetry.util.types import AttributeValue

from .._core.config import otel_metrics, otel_tracing
from . import otlp
from .recorder import SpanRecorder
from .spans import SCOPE, recorder, use_recorder

if TYPE_CHECKING:
    from .._core.router import Runtime

__all__ = ["FLUSH_TIMEOUT", "flush_telemetry", "start_telemetry"]

log = logging.getLogger("monarch.actor.telemetry")

# spans of Monarch's tracer that wait for export at most (the SDK's default is
# 2048): an actor handles bursts of 10,000 messages a second, and a span waiting costs
# a few hundred bytes
QUEUED_SPANS = 16384
# spans per export request at most (the SDK's default is 512): a request costs the
# sender and the collector far more than a span in it
BATCHED_SPANS = 4096
FLUSH_TIMEOUT = 3.0  # seconds a stopping proc gives its exporters before it exits
_HOST = socket.gethostname()

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
    in the controller and in procs, the SDK's providers the settings ask
    for; in procs, a flush of the exporters when the proc stops (a proc ends
    with ``os._exit``, past the SDK's own exit hooks)."""
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
    own = recorder()
    if own is not None:
        own.flush(timeout)
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
    made = SpanRecorder(
        sampler=None if sampler is sampling.DEFAULT_ON else sampler,
        id_generator=provider.id_generator,
        resource=dict(provider.resource.attributes),
        send=send,
        scope=SCOPE,
        batch=count("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", BATCHED_SPANS),
        queue=count("OTEL_BSP_MAX_QUEUE_SIZE", QUEUED_SPANS),
        delay=seconds("OTEL_BSP_SCHEDULE_DELAY", 5.0),
    )
    use_recorder(made)
    if role == "controller":  # a proc flushes as it stops (``start_telemetry``)
        atexit.register(made.shutdown, FLUSH_TIMEOUT)


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
