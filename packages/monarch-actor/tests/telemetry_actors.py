"""Actors and bootstraps of the telemetry tests (importable by the procs)."""

import logging
import os
from typing import Any

from opentelemetry import trace

from monarch_actor import Actor, concurrent_endpoint, config, endpoint, get_meter, span, traced
from monarch_actor._telemetry.spans import tracing_active

EXPORTER: Any = None  # the proc's in-memory span exporter, once memory_tracing ran
LINES: list[str] = []  # what the proc's own logging handler wrote


def memory_tracing() -> None:
    """Bootstrap: this proc's global tracer provider keeps its spans in memory."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    global EXPORTER
    EXPORTER = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(provider)


def export_to(endpoint_url: str, metrics: bool) -> None:
    """Bootstrap: the proc's exporters send OTLP over HTTP to ``endpoint_url``."""
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint_url
    os.environ["OTEL_EXPORTER_OTLP_PROTOCOL"] = "http/protobuf"
    if metrics:
        os.environ["ENABLE_OTEL_METRICS"] = "1"


class ListHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        LINES.append(self.format(record))


def log_to_list() -> None:
    """Bootstrap: a root handler made before the runtime starts (and its log prefix)."""
    handler = ListHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers.append(handler)  # not through addHandler: the runtime must find it anyway
    root.setLevel(logging.INFO)


@traced
def double(x: int) -> int:
    return 2 * x


@traced(name="halve")
async def half(x: int) -> int:
    return x // 2


def finished() -> list[dict[str, Any]]:
    """The spans the in-memory exporter holds, as plain data."""
    spans = []
    for s in EXPORTER.get_finished_spans():
        spans.append(
            {
                "name": s.name,
                "id": s.context.span_id,
                "parent": s.parent.span_id if s.parent else None,
                "attributes": dict(s.attributes or {}),
                "status": s.status.status_code.name,
                "events": [e.name for e in s.events],
            }
        )
    return spans


class Traced(Actor):
    @endpoint
    def work(self, x: int) -> int:
        with span("inner", {"x": x}):
            return double(x)

    @endpoint(instrument=False)
    def quiet(self) -> int:
        return 1

    @endpoint
    def boom(self) -> None:
        raise ValueError("traced failure")

    @endpoint(instrument=False)
    def spans(self) -> list[dict[str, Any]]:
        return finished()

    @endpoint(instrument=False)
    def state(self) -> dict[str, Any]:
        with span("probe") as s:
            recording = s.is_recording()
        return {"active": tracing_active(), "recording": recording}

    @endpoint
    def count(self, n: int) -> None:
        get_meter().create_counter("test.calls").add(n, {"who": "traced"})


class AsyncTraced(Actor):
    @endpoint
    async def work(self, x: int) -> int:
        with span("inner"):
            return await half(x)

    @concurrent_endpoint
    async def background(self, x: int) -> int:
        return await half(x)

    @endpoint(instrument=False)
    async def spans(self) -> list[dict[str, Any]]:
        return finished()


class Talker(Actor):
    @endpoint
    def warn(self, text: str) -> None:
        self.logger.warning("%s", text)

    @endpoint
    def info(self, text: str) -> None:
        logging.getLogger("talk.info").info(text)

    @endpoint
    def set_prefixing(self, on: bool) -> None:
        config.prefix_python_logs_with_actor = on

    @endpoint
    def lines(self) -> list[str]:
        return list(LINES)


class AsyncTalker(Actor):
    @endpoint
    async def info(self, text: str) -> None:
        logging.getLogger("talk.info").info(text)
