"""What telemetry costs on the actor benchmarks: ``actor_bench.py --impl ours``
run alternately in three modes, several times each, on one machine; prints
the median of each measure per mode and the costs.

- **bare**: the runtime without what observability adds to each message
  (``bare/sitecustomize.py`` takes out each actor's counters and flight
  recorder and the span check around instrumented endpoints);
- **off**: as shipped, telemetry off (the counters are always kept: the mesh
  admin reads them);
- **tracing**: what a user turns on: ``ENABLE_OTEL_TRACING=1`` (every
  process sets up tracing, every endpoint runs in a span) with the spans
  exported over OTLP/HTTP to a receiver this script runs on loopback, which
  counts the spans of each run (the run fails if none arrived: a benchmark
  of tracing that exports nothing measures nothing).

    python tools/bench/telemetry_bench.py [--runs 8] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MEASURES = {  # key: (what, unit, higher is better)
    "call_one": ("call_one round trip", "µs", False),
    "call8": ("call to 8 actors and gather", "µs", False),
    "pipelined": ("pipelined calls to one actor", "calls/s", True),
    "broadcast": ("broadcast to 8 actors", "/s", True),
    "echo_64m": ("64 MiB echo", "GB/s", True),
}


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver. It keeps the bodies and decodes them
    between runs: decoding while a run goes on would take CPU from it."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.bodies: list[bytes] = []

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def spans(self) -> int:
        """How many spans the bodies taken since the last call carry."""
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        bodies, self.bodies = self.bodies, []
        found = 0
        for body in bodies:
            request = ExportTraceServiceRequest.FromString(body)
            for resource in request.resource_spans:
                found += sum(len(scope.spans) for scope in resource.scope_spans)
        return found


class _Handler(BaseHTTPRequestHandler):
    server: Receiver
    protocol_version = "HTTP/1.1"  # connections stay open, as a collector's do

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path.endswith("/v1/traces"):
            self.server.bodies.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # the requests are not news
        pass


MODES = ("bare", "off", "tracing")


def run_once(mode: str, receiver: Receiver, quick: bool) -> dict[str, float]:
    env = dict(os.environ)
    for name in [n for n in env if n.startswith(("OTEL_", "ENABLE_OTEL_"))]:
        del env[name]
    if mode == "bare":
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(HERE / "bare"), env.get("PYTHONPATH")])
        )
    if mode == "tracing":
        env.update(
            ENABLE_OTEL_TRACING="1",
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        )
    command = [sys.executable, str(HERE / "actor_bench.py"), "--impl", "ours", "--sweep", ""]
    if quick:
        command.append("--quick")
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"actor_bench.py failed ({done.returncode}):\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def shown(key: str, value: float) -> str:
    if key in ("call_one", "call8"):
        return f"{value * 1e6:.1f} µs"
    if key == "echo_64m":
        return f"{value / 1e9:.2f} GB/s"
    return f"{value:,.0f} {MEASURES[key][1]}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=6, help="runs of each mode, alternating")
    parser.add_argument("--quick", action="store_true", help="actor_bench --quick (a smoke test)")
    parser.add_argument("--json", help="also write the runs and medians here")
    args = parser.parse_args()

    receiver = Receiver()
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    for i in range(args.runs):
        for mode in MODES[i % 3 :] + MODES[: i % 3]:  # each mode first in a third of the rounds
            runs[mode].append(run_once(mode, receiver, args.quick))
            exported = receiver.spans()
            print(f"run {i + 1}/{args.runs} {mode}: {exported:,} spans exported", file=sys.stderr)
            if (mode == "tracing") != (exported > 0):
                sys.exit(f"{exported} spans reached the receiver in a {mode} run")
    receiver.shutdown()

    medians = {
        mode: {key: statistics.median(r[key] for r in results) for key in MEASURES}
        for mode, results in runs.items()
    }

    def cost(key: str, mode: str) -> str:
        base, value = medians["bare"][key], medians[mode][key]
        return f"{(base / value - 1) if MEASURES[key][2] else (value / base - 1):+.1%}"

    print("| measure | bare | telemetry off | tracing on | off vs bare | on vs bare |")
    print("|---|---|---|---|---|---|")
    for key, (what, _, _) in MEASURES.items():
        values = " | ".join(shown(key, medians[mode][key]) for mode in MODES)
        print(f"| {what} | {values} | {cost(key, 'off')} | {cost(key, 'tracing')} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "medians": medians}, indent=1))


if __name__ == "__main__":
    main()
