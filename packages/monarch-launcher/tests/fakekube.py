"""A small Kubernetes API server for KubernetesJob's tests: a real HTTP
server that speaks enough of the REST API (Secrets, Services, StatefulSets,
watching Pods) for the real ``kubernetes`` client, with a fake kubelet that
runs each pod's container command as a local process on its own loopback
address (127.0.0.x), so the workers it starts are real and the controller
attaches to them.

Not a mock: the client talks HTTP to it. It records every request
(``requests``) and can be told to refuse some (``refuse``)."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

CORE = re.compile(r"^/api/v1/namespaces/([^/]+)/(secrets|services|pods)(?:/([^/]+))?$")
APPS = re.compile(r"^/apis/apps/v1/namespaces/([^/]+)/(statefulsets)(?:/([^/]+))?$")


def _matches(labels: dict, selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


class FakeKubernetes:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.requests: list[tuple[str, str, dict | None, dict]] = []
        self.refuse: dict[tuple[str, str], tuple[int, str]] = {}
        self.processes: dict[str, subprocess.Popen] = {}
        self.kubelet_runs_pods = True
        self._lock = threading.RLock()
        self._watchers: list[tuple[str, str, queue.Queue]] = []
        self._next_ip = 10
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, and chunked watch streams

            def log_message(self, *args):  # quiet
                pass

            def _body(self):
                length = int(self.headers.get("Content-Length") or 0)
                return json.loads(self.rfile.read(length)) if length else None

            def _reply(self, code, obj):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method):
                url = urlparse(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                body = self._body() if method in ("POST", "PUT", "PATCH") else None
                fake.requests.append((method, url.path, body, dict(self.headers)))
                found = CORE.match(url.path) or APPS.match(url.path)
                if found is None:
                    return self._reply(404, _status(404, f"no route {url.path}"))
                namespace, plural, name = found.groups()
                refused = fake.refuse.get((method, plural))
                if refused is not None:
                    return self._reply(refused[0], _status(*refused))
                if plural == "pods" and method == "GET" and query.get("watch") == "true":
                    return fake._watch(self, namespace, query)
                if plural == "pods" and method == "GET":
                    items = fake.pods(namespace, query.get("labelSelector", ""))
                    return self._reply(
                        200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
                    )
                code, obj = fake._crud(method, namespace, plural, name, body)
                return self._reply(code, obj)

            def do_GET(self):
                self._handle("GET")

            def do_POST(self):
                self._handle("POST")

            def do_PUT(self):
                self._handle("PUT")

            def do_DELETE(self):
                self._handle("DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    # -- objects -------------------------------------------------------------------------

    def _crud(self, method, namespace, plural, name, body):
        with self._lock:
            if method == "POST":
                key = (plural, namespace, body["metadata"]["name"])
                if key in self.objects:
                    return 409, _status(409, f"{plural} {key[2]} already exists", "AlreadyExists")
                self.objects[key] = body
                if plural == "statefulsets":
                    self._start_pods(namespace, body)
                return 201, body
            key = (plural, namespace, name)
            if key not in self.objects:
                return 404, _status(404, f"{plural} {name} not found", "NotFound")
            if method == "PUT":
                self.objects[key] = body
                return 200, body
            if method == "DELETE":
                gone = self.objects.pop(key)
                if plural == "statefulsets":
                    self._stop_pods(namespace, name)
                return 200, gone
            return 200, self.objects[key]

    def add_pod(self, namespace: str, pod: dict) -> None:
        """Make a pod appear (as an operator would), announced to watchers."""
        with self._lock:
            self.objects[("pods", namespace, pod["metadata"]["name"])] = pod
            self._announce(namespace, "ADDED", pod)

    def set_pod(self, namespace: str, pod: dict, kind: str = "MODIFIED") -> None:
        with self._lock:
            self.objects[("pods", namespace, pod["metadata"]["name"])] = pod
            self._announce(namespace, kind, pod)

    def pods(self, namespace: str, selector: str) -> list[dict]:
        with self._lock:
            return [
                pod
                for (plural, ns, _), pod in self.objects.items()
                if plural == "pods"
                and ns == namespace
                and _matches(pod["metadata"].get("labels") or {}, selector)
            ]

    # -- watching ------------------------------------------------------------------------

    def _announce(self, namespace, kind, pod):
        for ns, selector, events in list(self._watchers):
            if ns == namespace and _matches(pod["metadata"].get("labels") or {}, selector):
                events.put({"type": kind, "object": pod})

    def _watch(self, handler, namespace, query):
        selector = query.get("labelSelector", "")
        timeout = float(query.get("timeoutSeconds", 3600))
        events: queue.Queue = queue.Queue()
        with self._lock:
            for pod in self.pods(namespace, selector):
                events.put({"type": "ADDED", "object": pod})
            watcher = (namespace, selector, events)
            self._watchers.append(watcher)
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")  # one chunk per event, as the API
        handler.end_headers()
        deadline = time.monotonic() + timeout
        try:
            while (left := deadline - time.monotonic()) > 0:
                try:
                    event = events.get(timeout=min(left, 0.5))
                except queue.Empty:
                    continue
                line = json.dumps(event).encode() + b"\n"
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                handler.wfile.flush()
            handler.wfile.write(b"0\r\n\r\n")
            handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with self._lock:
                self._watchers.remove(watcher)

    # -- the kubelet ---------------------------------------------------------------------

    def _env(self, namespace, container, pod_ip):
        env = {}
        for item in container.get("env") or []:
            if "value" in item:
                env[item["name"]] = item["value"]
                continue
            source = item.get("valueFrom") or {}
            if source.get("fieldRef", {}).get("fieldPath") == "status.podIP":
                env[item["name"]] = pod_ip
            elif "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                secret = self.objects[("secrets", namespace, ref["name"])]
                env[item["name"]] = secret["stringData"][ref["key"]]
        return env

    def _start_pods(self, namespace, stateful_set):
        template = stateful_set["spec"]["template"]
        for i in range(stateful_set["spec"]["replicas"]):
            pod_ip = f"127.0.0.{self._next_ip}"
            self._next_ip += 1
            name = f"{stateful_set['metadata']['name']}-{i}"
            labels = {**template["metadata"]["labels"], "apps.kubernetes.io/pod-index": str(i)}
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "spec": template["spec"],
                "status": {
                    "phase": "Pending",
                    "podIP": pod_ip,
                    "conditions": [{"type": "Ready", "status": "False"}],
                },
            }
            self.add_pod(namespace, pod)
            if self.kubelet_runs_pods:
                self._run(namespace, pod)

    def _run(self, namespace, pod):
        container = pod["spec"]["containers"][0]
        pod_ip = pod["status"]["podIP"]
        env = self._env(namespace, container, pod_ip)
        argv = [
            re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), a)
            for a in container["command"] + (container.get("args") or [])
        ]
        if argv[0] == "python":
            argv[0] = sys.executable
        proc = subprocess.Popen(
            argv, env={**os.environ, **env}, start_new_session=True, stdin=subprocess.DEVNULL
        )
        self.processes[pod["metadata"]["name"]] = proc
        ready = json.loads(json.dumps(pod))  # running: Ready (no readiness probe)
        ready["status"]["phase"] = "Running"
        ready["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        self.set_pod(namespace, ready)

    def _stop_pods(self, namespace, set_name):
        with self._lock:
            for (plural, ns, name), pod in list(self.objects.items()):
                if plural == "pods" and ns == namespace and name.startswith(f"{set_name}-"):
                    del self.objects[(plural, ns, name)]
                    self._announce(namespace, "DELETED", pod)
                    proc = self.processes.pop(name, None)
                    if proc is not None and proc.poll() is None:
                        os.killpg(proc.pid, signal.SIGTERM)
                        proc.wait(30)

    def close(self) -> None:
        for proc in self.processes.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
        self.server.shutdown()
        self.server.server_close()

    def kubeconfig(self, path, token="t0ken") -> str:
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters:\n- name: fake\n  cluster:\n    server: {self.url}\n"
            f"users:\n- name: me\n  user:\n    token: {token}\n"
            "contexts:\n- name: here\n  context:\n    cluster: fake\n    user: me\n"
            "current-context: here\n"
        )
        return str(path)


def _status(code, message, reason="Forbidden"):
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
