"""The examples gallery (docs/examples): every script runs as its page shows
it and prints what the page says it prints.

Each page includes its script from docs/examples/ (pymdownx.snippets), so the
file run here is the code on the page. Scripts that need something around
them get it here: a real OTLP/HTTP receiver, a Kubernetes API server (the
launcher's test double, whose kubelet runs the pods' commands as local
processes), a real Slurm cluster where one answers (CI starts one with
tools/slurm-cluster).
"""

from __future__ import annotations

import contextlib
import http.server
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "docs" / "examples"
INCLUDE = re.compile(r'^--8<-- "([^"]+)"$', re.M)

# script -> lines its output must contain (besides its last line, "...: ok")
PLAIN = {
    "ping_pong.py": ["pong got ball 2", "ping got ball 2"],
    "crawler.py": ["17 pages fetched by 3 crawlers"],
    "spmd_ddp.py": ["step 4: loss", "rank 0 of 2 (local rank 0): weights agree"],
    "fault_tolerant_training.py": [
        "step 2: OSError('could not read the batch'); retrying",
        "step 5: a worker died; back to the checkpoint",
        "__supervise__: workers [1] failed",
        "w after 8 steps: 2.8271",  # as if nothing had failed (the script checks that too)
    ],
    "rl_weight_sync.py": ["iteration 7: mean reward", "weights moved with the cma backend"],
}
# run by the scripts above, or data: not run on their own
HELPERS = {"ddp_train.py", "kubernetes/workers.yaml", "kubernetes/controller.yaml"}


def run(script: str, *args: str, env: dict[str, str] | None = None, cwd: Path) -> str:
    """Run a gallery script as a user would; its output, once it ended well."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=240,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"{script} failed:\n{output}"
    assert done.stdout.strip().splitlines()[-1].endswith(": ok"), output
    return output


@pytest.mark.parametrize("script", sorted(PLAIN))
def test_example_runs(script, tmp_path):
    output = run(script, cwd=tmp_path)
    for line in PLAIN[script]:
        assert line in output, f"{script}: {line!r} not in its output:\n{output}"


def test_the_rl_example_also_syncs_over_tcp(tmp_path):
    output = run("rl_weight_sync.py", env={"MONARCH_RDMA_BACKEND": "tcp"}, cwd=tmp_path)
    assert "weights moved with the tcp backend" in output


def test_every_page_shows_a_file_that_is_tested():
    """Each page's code is a file included from docs/examples/, and each such
    file is run by a test of this module (or by a script that is)."""
    tested = {*PLAIN, "otel_tracing.py", "kubernetes_ddp.py", "slurm_job.py", *HELPERS}
    shown = set()
    for page in EXAMPLES.glob("*.md"):
        for name in INCLUDE.findall(page.read_text()):
            assert (EXAMPLES / name).is_file(), f"{page.name} includes {name}, which is missing"
            shown.add(name)
    files = {str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*") if p.suffix != ".md"}
    files = {f for f in files if (EXAMPLES / f).is_file() and "__pycache__" not in f}
    assert files == shown, "every example file is shown on a page"
    assert files == tested, "every example file is run by a test here"


# -- OpenTelemetry --------------------------------------------------------------------------


class OtlpReceiver:
    """An OTLP/HTTP collector on a real socket: it decodes what arrives with
    OpenTelemetry's own protobuf classes and keeps the spans and metric names."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
            ExportMetricsServiceRequest,
        )
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        self.spans: list[dict] = []
        self.metrics: list[dict] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path == "/v1/traces":
                    request = ExportTraceServiceRequest.FromString(body)
                    for resource in request.resource_spans:
                        about = {a.key: a.value for a in resource.resource.attributes}
                        for scope in resource.scope_spans:
                            receiver.spans += [
                                {
                                    "name": s.name,
                                    "id": s.span_id,
                                    "parent": s.parent_span_id,
                                    "service": about["service.name"].string_value,
                                    "attributes": {a.key: a.value for a in s.attributes},
                                }
                                for s in scope.spans
                            ]
                elif self.path == "/v1/metrics":
                    request = ExportMetricsServiceRequest.FromString(body)
                    for resource in request.resource_metrics:
                        about = {a.key: a.value for a in resource.resource.attributes}
                        for scope in resource.scope_metrics:
                            receiver.metrics += [
                                {
                                    "name": m.name,
                                    "pid": about["process.pid"].int_value,
                                    "values": [p.as_int for p in m.sum.data_points],
                                }
                                for m in scope.metrics
                            ]
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def collector() -> Iterator[OtlpReceiver]:
    pytest.importorskip("opentelemetry.sdk", reason="needs monarch-actor[otel]")
    receiver = OtlpReceiver()
    yield receiver
    receiver.close()


def test_the_telemetry_example_sends_spans_and_metrics_to_a_collector(collector, tmp_path):
    env = {
        "ENABLE_OTEL_TRACING": "1",
        "ENABLE_OTEL_METRICS": "1",
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_SERVICE_NAME": "gallery-training",
    }
    run("otel_tracing.py", env=env, cwd=tmp_path)  # every process flushed as it ended
    spans = collector.spans
    assert {s["service"] for s in spans} == {"gallery-training"}
    by_id = {s["id"]: s for s in spans}
    steps = [s for s in spans if s["name"] == "train_step"]
    assert len(steps) == 2 * 3  # two actors, three steps
    assert {s["attributes"]["monarch.actor.name"].string_value for s in steps} == {"trainers"}
    assert {s["attributes"]["monarch.actor.rank"].int_value for s in steps} == {0, 1}
    for child in ("forward", "load_batch"):  # inside the endpoint's span, in its trace
        found = [s for s in spans if s["name"] == child]
        assert len(found) == 6 and {by_id[s["parent"]]["name"] for s in found} == {"train_step"}
    forward = [s["attributes"]["gallery.step"].int_value for s in spans if s["name"] == "forward"]
    assert sorted(forward) == [0, 0, 1, 1, 2, 2]
    (run_span,) = [s for s in spans if s["name"] == "training run"]
    assert run_span["attributes"]["gallery.steps"].int_value == 3
    counted: dict[int, int] = {}  # the count (cumulative) of each process that counted
    for metric in collector.metrics:
        if metric["name"] == "gallery.train_steps":
            counted[metric["pid"]] = max([counted.get(metric["pid"], 0), *metric["values"]])
    assert sorted(counted.values()) == [3, 3], collector.metrics  # 3 steps in each of 2 procs


# -- Kubernetes -----------------------------------------------------------------------------


def test_the_kubernetes_manifests_and_script_agree(tmp_path):
    yaml = pytest.importorskip("yaml")
    workers = list(yaml.safe_load_all((EXAMPLES / "kubernetes" / "workers.yaml").read_text()))
    controller = list(yaml.safe_load_all((EXAMPLES / "kubernetes" / "controller.yaml").read_text()))
    (stateful_set,) = [m for m in workers if m["kind"] == "StatefulSet"]
    (pod,) = [m for m in controller if m["kind"] == "Pod"]
    assert {m["metadata"]["namespace"] for m in workers + controller} == {"monarch-ddp"}
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["DDP_HOSTS"]["value"] == str(stateful_set["spec"]["replicas"])
    assert pod["spec"]["containers"][0]["command"][-1] == "/scripts/kubernetes_ddp.py"
    worker = stateful_set["spec"]["template"]["spec"]["containers"][0]
    secret = {"secretKeyRef": {"name": "monarch-ddp-secret", "key": "secret"}}
    assert env["MONARCH_JOB_SECRET"]["valueFrom"] == secret
    assert {e["name"]: e.get("valueFrom") for e in worker["env"]}["MONARCH_JOB_SECRET"] == secret
    script = (EXAMPLES / "kubernetes_ddp.py").read_text()
    for name in ("POD_NAMESPACE", "DDP_HOSTS", "DDP_PROCS_PER_HOST"):
        assert f'os.environ.get("{name}"' in script, f"the script does not read {name}"
    # the labels the script's KubernetesJob looks for (add_mesh's defaults)
    labels = stateful_set["spec"]["template"]["metadata"]["labels"]
    assert labels == {
        "app.kubernetes.io/name": "monarch-worker",
        "monarch.pytorch.org/mesh-name": "trainers",
    }


@pytest.fixture
def fake_kubernetes() -> Iterator[object]:
    pytest.importorskip("kubernetes")
    pytest.importorskip("yaml")
    sys.path.insert(0, str(ROOT / "packages" / "monarch-launcher" / "tests"))
    try:
        from fakekube import FakeKubernetes
    finally:
        sys.path.pop(0)
    fake = FakeKubernetes()
    yield fake
    fake.close()


def test_the_kubernetes_example_trains_on_the_pods_its_manifests_make(fake_kubernetes, tmp_path):
    """workers.yaml applied to a Kubernetes API server whose kubelet runs each
    pod's command here; kubernetes_ddp.py, run as controller.yaml runs it,
    finds those pods and trains on them. Not exercised: a real cluster, its
    image, DNS, RBAC and GPUs."""
    import yaml
    from kubernetes import client

    fake: object = fake_kubernetes
    secret = os.urandom(32).hex()
    api = client.ApiClient(client.Configuration(host=fake.url))  # type: ignore[attr-defined]
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    namespace = "monarch-ddp"
    # kubectl create secret generic monarch-ddp-secret --from-literal=secret=...
    core.create_namespaced_secret(
        namespace,
        {"metadata": {"name": "monarch-ddp-secret"}, "stringData": {"secret": secret}},
    )
    # kubectl apply -f workers.yaml
    for manifest in yaml.safe_load_all((EXAMPLES / "kubernetes" / "workers.yaml").read_text()):
        if manifest["kind"] == "Service":
            core.create_namespaced_service(namespace, manifest)
        else:
            apps.create_namespaced_stateful_set(namespace, manifest)
    # the controller pod's environment, as controller.yaml sets it
    controller = yaml.safe_load_all((EXAMPLES / "kubernetes" / "controller.yaml").read_text())
    (pod,) = [m for m in controller if m["kind"] == "Pod"]
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"] if "value" in e}
    env |= {
        "POD_NAMESPACE": namespace,
        "MONARCH_JOB_SECRET": secret,
        "KUBECONFIG": fake.kubeconfig(tmp_path / "kubeconfig"),  # type: ignore[attr-defined]
    }
    applied = len(fake.requests)  # type: ignore[attr-defined]
    output = run("kubernetes_ddp.py", env=env, cwd=tmp_path)
    assert "found {hosts: 2} in namespace monarch-ddp" in output
    assert re.search(r"rank 1: loss \d+\.\d+ -> \d+\.\d+", output), output
    # all the controller asked of the API: what controller.yaml's Role allows (reading pods)
    asked = {(method, path) for method, path, *_ in fake.requests[applied:]}  # type: ignore[attr-defined]
    assert asked == {("GET", f"/api/v1/namespaces/{namespace}/pods")}, asked


# -- Slurm ----------------------------------------------------------------------------------


def slurm_missing() -> str | None:
    """Why no Slurm job can run here, or None when a cluster answers."""
    if shutil.which("sbatch") is None:
        return "no Slurm here: sbatch is not on PATH (CI starts one: tools/slurm-cluster start)"
    try:
        done = subprocess.run(["sinfo", "-h"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"sinfo fails: {error}"
    return None if done.returncode == 0 else "Slurm is installed but no cluster answers"


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive free ports, below the ephemeral range."""
    for _ in range(1000):
        first = random.randrange(20000, 32000 - count)
        with contextlib.ExitStack() as held:
            try:
                for port in range(first, first + count):
                    held.enter_context(socket.socket()).bind(("127.0.0.1", port))
            except OSError:
                continue
            return first
    raise RuntimeError("no free ports")


@pytest.mark.skipif(slurm_missing() is not None, reason=str(slurm_missing()))
def test_the_slurm_example_runs_a_batch_job(tmp_path):
    nodes = subprocess.run(
        ["sinfo", "-h", "-o", "%D"], capture_output=True, text=True, timeout=30
    ).stdout.split()
    count = min(2, sum(map(int, nodes)))
    # nodes of a one-machine test cluster share its address: their workers take consecutive ports
    port = str(free_ports(count))
    output = run("slurm_job.py", "--nodes", str(count), "--port", port, cwd=tmp_path)
    assert f"counted by {count} nodes" in output
    found = re.search(r"Slurm job (\d+): \{hosts: (\d+)\}", output)
    assert found and int(found[2]) == count, output
    job_id = found[1]
    queued = subprocess.run(
        ["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=30
    ).stdout.strip()
    assert queued in ("", "COMPLETING", "CANCELLED"), f"the job outlived the script: {queued}"
