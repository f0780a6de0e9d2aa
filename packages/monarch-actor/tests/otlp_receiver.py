"""Collectors for the telemetry tests: they take OTLP exports over HTTP or
gRPC on a real socket, decode them with OpenTelemetry's own protobuf classes
and keep what they carry."""

from __future__ import annotations

import gzip
import http.server
import threading
import zlib
from collections.abc import Callable
from concurrent import futures

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


def value(any_value):
    """An OTLP ``AnyValue`` as Python (an array as a list)."""
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def attributes(key_values) -> dict:
    return {kv.key: value(kv.value) for kv in key_values}


def spans_of(body: bytes) -> list[dict]:
    """The spans of an encoded ``ExportTraceServiceRequest``, as plain data."""
    found = []
    request = ExportTraceServiceRequest.FromString(body)
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope in resource_spans.scope_spans:
            for s in scope.spans:
                found.append(
                    {
                        "resource": resource,
                        "scope": scope.scope.name,
                        "name": s.name,
                        "kind": s.kind,
                        "trace_id": int.from_bytes(s.trace_id, "big"),
                        "id": int.from_bytes(s.span_id, "big"),
                        "parent": int.from_bytes(s.parent_span_id, "big") or None,
                        "start": s.start_time_unix_nano,
                        "end": s.end_time_unix_nano,
                        "flags": s.flags,
                        "attributes": attributes(s.attributes),
                        "events": [
                            {"name": e.name, "time": e.time_unix_nano, **attributes(e.attributes)}
                            for e in s.events
                        ],
                        "links": [
                            (
                                int.from_bytes(link.trace_id, "big"),
                                int.from_bytes(link.span_id, "big"),
                            )
                            for link in s.links
                        ],
                        "status": (s.status.code, s.status.message),
                    }
                )
    return found


class Receiver:
    """An OTLP/HTTP collector. ``answers`` are the HTTP statuses of the next
    requests (200 once they run out)."""

    def __init__(self) -> None:
        self.spans: list[dict] = []
        self.points: list[dict] = []
        self.requests: list[dict] = []  # path and headers of each request
        self.answers: list[int] = []
        self.changed = threading.Condition()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # connections stay open, as a collector's do

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                encoding = self.headers.get("Content-Encoding")
                with receiver.changed:
                    receiver.requests.append(
                        {"path": self.path, **{k.lower(): v for k, v in self.headers.items()}}
                    )
                    status = receiver.answers.pop(0) if receiver.answers else 200
                    receiver.changed.notify_all()
                if status == 200:
                    if encoding == "gzip":
                        body = gzip.decompress(body)
                    elif encoding == "deflate":
                        body = zlib.decompress(body)
                    receiver.take(self.path, body)
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def take(self, path: str, body: bytes) -> None:
        if path == "/v1/traces":
            for s in spans_of(body):
                self._add(self.spans, s)
        elif path == "/v1/metrics":
            request = ExportMetricsServiceRequest.FromString(body)
            for resource_metrics in request.resource_metrics:
                resource = attributes(resource_metrics.resource.attributes)
                for scope in resource_metrics.scope_metrics:
                    for metric in scope.metrics:
                        for point in metric.sum.data_points:
                            self._add(
                                self.points,
                                {
                                    "resource": resource,
                                    "name": metric.name,
                                    "value": value(point),
                                    "attributes": attributes(point.attributes),
                                },
                            )

    def _add(self, where: list[dict], item: dict) -> None:
        with self.changed:
            where.append(item)
            self.changed.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 30.0) -> bool:
        with self.changed:
            return self.changed.wait_for(predicate, timeout)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class GrpcReceiver:
    """An OTLP/gRPC collector of traces (bytes in, decoded as the HTTP one)."""

    METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

    def __init__(self) -> None:
        import grpc

        self.spans: list[dict] = []
        self.metadata: list[dict] = []
        self.changed = threading.Condition()
        receiver = self

        def export(body: bytes, context) -> bytes:
            with receiver.changed:
                receiver.metadata.append(dict(context.invocation_metadata()))
                receiver.spans.extend(spans_of(body))
                receiver.changed.notify_all()
            return b""  # an empty ExportTraceServiceResponse

        class Handler(grpc.GenericRpcHandler):
            def service(self, details):
                if details.method == GrpcReceiver.METHOD:
                    return grpc.unary_unary_rpc_method_handler(export)
                return None

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers((Handler(),))
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.url = f"http://127.0.0.1:{port}"

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 30.0) -> bool:
        with self.changed:
            return self.changed.wait_for(predicate, timeout)

    def close(self) -> None:
        self.server.stop(None)
