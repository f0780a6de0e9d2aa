"""``KubernetesJob``: hosts that are pods. A mesh added with an image (or a
pod template) is *provisioned*: ``apply`` creates, through the Kubernetes
API, a StatefulSet of worker pods, its headless Service and a Secret holding
the job secret the workers and the controller share. A mesh added without
one is *attach-only*: its pods already exist (made by an operator, a Helm
chart, by hand) and are found by label. Either way the controller waits for
pods ``0..N-1`` (by their rank label) to be Ready and attaches to
``tcp://POD_IP:PORT``.

The ``kubernetes`` package is imported on first use (``pip install
'monarch-launcher[kubernetes]'``); building manifests needs no cluster."""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from monarch_actor import attach_to_workers

from ._errors import JobError, Unsupported
from ._job import JobState, JobTrait
from ._secret import SECRET_ENV, adopt_secret, secret_for_workers

__all__ = [
    "DEFAULT_PORT",
    "ImageSpec",
    "KubeConfig",
    "KubernetesJob",
    "MESH_LABEL",
    "RANK_LABEL",
    "WORKER_LABELS",
]

log = logging.getLogger("monarch.launcher.kubernetes")

DEFAULT_PORT = 26600
"""The port workers listen on unless ``add_mesh(port=...)`` says otherwise."""
RANK_LABEL = "apps.kubernetes.io/pod-index"
"""The pod label holding a pod's rank (a StatefulSet sets it, Kubernetes 1.28+)."""
MESH_LABEL = "monarch.pytorch.org/mesh-name"
"""The pod label naming the mesh a worker pod belongs to."""
WORKER_LABELS = {"app.kubernetes.io/name": "monarch-worker"}
"""Labels every worker pod carries."""
_SECRET_KEY = "secret"
_MAX_NAME = 63


def _kubernetes() -> Any:
    """The ``kubernetes`` package's modules, or a clear error naming the extra."""
    try:
        return SimpleNamespace(
            client=importlib.import_module("kubernetes.client"),
            config=importlib.import_module("kubernetes.config"),
            watch=importlib.import_module("kubernetes.watch"),
            ApiException=importlib.import_module("kubernetes.client.rest").ApiException,
        )
    except ImportError:
        raise ImportError(
            "KubernetesJob talks to the cluster through the kubernetes package: "
            "pip install 'monarch-launcher[kubernetes]' (or pip install kubernetes)"
        ) from None


@dataclasses.dataclass(frozen=True)
class ImageSpec:
    """The container image of a provisioned mesh's worker pods, and their resources.

    For example,
    ``ImageSpec("ghcr.io/me/train:latest", resources={"nvidia.com/gpu": 8})``.
    The image must have Python with ``monarch_launcher`` installed.

    Args:
        image: the container image the worker pods run.
        resources: each worker container's resources, such as
            ``{"cpu": 8, "memory": "32Gi"}``, each both requested and the limit;
            None sets none.

    Attributes:
        image: the container image the worker pods run.
        resources: each worker container's resources (requested and the
            limit), or None.
    """

    image: str
    resources: dict[str, str | int] | None = None


@dataclasses.dataclass(frozen=True)
class KubeConfig:
    """How to reach the Kubernetes cluster.

    Through a kubeconfig file (``from_path``), a
    ``kubernetes.client.Configuration`` (``from_config``), or, with neither,
    the in-cluster service account (a controller running in a pod).

    Args:
        local: the kubeconfig file to use.
        remote: a ready ``kubernetes.client.Configuration`` to use (it wins
            over ``local``).

    Attributes:
        local: the kubeconfig file to use, or None.
        remote: a ready ``kubernetes.client.Configuration``, or None.
    """

    local: Path | None = None
    remote: Any = None

    @classmethod
    def from_path(cls, path: str) -> KubeConfig:
        """Reach the cluster with the credentials of a kubeconfig file.

        Args:
            path: the kubeconfig file; ``~`` is expanded.

        Returns:
            The configuration naming that file.
        """
        return cls(local=Path(path).expanduser())

    @classmethod
    def from_config(cls, config: Any) -> KubeConfig:
        """Reach the cluster with a ready ``kubernetes.client.Configuration``.

        Args:
            config: the ``kubernetes.client.Configuration`` to use.

        Returns:
            The configuration holding ``config``.
        """
        return cls(remote=config)

    @property
    def out_of_cluster(self) -> bool:
        """True when the controller reaches the cluster from outside."""
        return self.local is not None or self.remote is not None

    def api_client(self) -> Any:
        """Make a ``kubernetes.client.ApiClient`` for this cluster.

        Raises:
            ImportError: the ``kubernetes`` package is not installed.
            JobError: the kubeconfig file cannot be used, or, with none given,
                this process does not run in a pod.
        """
        k8s = _kubernetes()
        if self.remote is not None:
            return k8s.client.ApiClient(self.remote)
        if self.local is not None:
            try:
                return k8s.config.new_client_from_config(config_file=str(self.local))
            except Exception as error:
                raise JobError(f"cannot use the kubeconfig file {self.local}: {error}") from None
        configuration = k8s.client.Configuration()
        try:
            k8s.config.load_incluster_config(client_configuration=configuration)
        except Exception as error:
            raise JobError(
                f"no kubeconfig given and not running in a pod ({error}): pass "
                "kubeconfig=KubeConfig.from_path('~/.kube/config')"
            ) from None
        return k8s.client.ApiClient(configuration)

    def load(self) -> None:
        """Make this the ``kubernetes`` package's default configuration (as
        Monarch's ``KubeConfig.load`` does); ``KubernetesJob`` itself does not
        need it."""
        k8s = _kubernetes()
        k8s.client.Configuration.set_default(self.api_client().configuration)


def check_mesh_name(name: str) -> None:
    """A mesh name is an RFC 1123 label that also works as a host name:
    lowercase letters and digits, starting with a letter, at most 63."""
    if not isinstance(name, str) or not name:
        raise ValueError("Empty mesh name is invalid.")
    if len(name) > _MAX_NAME:
        raise ValueError(f"Mesh name '{name}' is invalid. Name must contain at most 63 characters.")
    if not name.isalnum() or not name.islower() or not name.isascii():
        raise ValueError(
            f"Mesh name '{name}' is invalid. Name must contain only lowercase alphanumeric "
            "characters."
        )
    if not name[0].isalpha():
        raise ValueError(
            f"Mesh name '{name}' is invalid. Name must start with an alphabetic character."
        )


def _plain(obj: Any) -> Any:
    """A Kubernetes model object (or plain data) as plain JSON-ready data."""
    if obj is None or isinstance(obj, (dict, list, str, int, float, bool)):
        if isinstance(obj, dict):
            return {k: _plain(v) for k, v in obj.items() if v is not None}
        if isinstance(obj, list):
            return [_plain(v) for v in obj]
        return obj
    return _kubernetes().client.ApiClient().sanitize_for_serialization(obj)


@dataclasses.dataclass
class _Pod:
    name: str
    ip: str
    port: int


class KubernetesJob(JobTrait):
    """A job whose hosts are Kubernetes pods, one mesh per ``add_mesh``.

    ``add_mesh(name, n, image_spec=ImageSpec(...))`` provisions ``n`` worker
    pods (a StatefulSet named ``name``, a headless Service ``name-svc`` and a
    Secret ``name-monarch-secret``); ``add_mesh(name, n)`` attaches to pods
    labelled ``app.kubernetes.io/name=monarch-worker`` and
    ``monarch.pytorch.org/mesh-name=name`` (or ``label_selector``) that run
    ``monarch worker`` themselves. The controller must reach the pods' IPs:
    run it in the cluster, or where pod IPs are routed.

    Args:
        namespace: the namespace every mesh lives in.
        timeout: seconds to wait for each mesh's pods to be Ready (None: as
            long as it takes).
        kubeconfig: how to reach the cluster (default: the in-cluster
            service account).
        attach_to: a gateway into the cluster: not supported.

    Raises:
        Unsupported: ``attach_to`` is given; the controller must reach the
            pods' IPs itself.
        ValueError: ``namespace`` is empty or ``timeout`` is not a positive
            whole number.
    """

    def __init__(
        self,
        namespace: str,
        timeout: int | None = None,
        kubeconfig: KubeConfig | None = None,
        attach_to: str | None = None,
    ) -> None:
        if attach_to is not None:
            raise Unsupported(
                "KubernetesJob(attach_to=...) is not supported: run the controller where it "
                "reaches the pods' IPs (in the cluster)"
            )
        if not isinstance(namespace, str) or not namespace:
            raise ValueError(f"KubernetesJob needs a namespace, got {namespace!r}")
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 1
        ):
            raise ValueError(
                f"KubernetesJob: timeout is a whole number of seconds, got {timeout!r}"
            )
        self._namespace = namespace
        self._timeout = timeout
        self._kubeconfig = kubeconfig or KubeConfig()
        self._meshes: dict[str, dict[str, Any]] = {}
        self._secret: str | None = None
        super().__init__()

    def add_mesh(
        self,
        name: str,
        num_replicas: int,
        label_selector: str | None = None,
        pod_rank_label: str = RANK_LABEL,
        image_spec: ImageSpec | None = None,
        port: int = DEFAULT_PORT,
        pod_template: Any = None,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
    ) -> None:
        """Add a mesh of pods, as in Monarch.

        The mesh is provisioned (``apply`` creates its pods) when
        ``image_spec`` or ``pod_template`` is given, and attach-only (its pods
        exist already) otherwise.

        Args:
            name: the mesh's name: lowercase letters and digits, starting
                with a letter, at most 63 characters.
            num_replicas: how many pods (hosts) the mesh has.
            label_selector: attach-only: the label selector that finds the
                mesh's pods (default: the worker and mesh-name labels).
            pod_rank_label: attach-only: the pod label holding each pod's rank.
            image_spec: provisioned: the worker pods' image and resources.
            port: the port the workers listen on.
            pod_template: provisioned: a ``V1PodTemplateSpec`` (or its dict)
                whose containers run ``monarch worker`` at
                ``tcp://$(POD_IP):port``; instead of ``image_spec``.
            labels: provisioned: labels added to the StatefulSet.
            annotations: provisioned: annotations added to the StatefulSet.

        Raises:
            ValueError: the name, count or port is not valid, or an option is
                given that does not fit a provisioned (or attach-only) mesh.
        """
        check_mesh_name(name)
        if isinstance(num_replicas, bool) or not isinstance(num_replicas, int) or num_replicas < 1:
            raise ValueError(
                f"mesh {name!r} needs a positive number of replicas, got {num_replicas!r}"
            )
        if not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"mesh {name!r}: port must be a TCP port (1-65535), got {port!r}")
        provisioned = image_spec is not None or pod_template is not None
        if image_spec is not None and pod_template is not None:
            raise ValueError("'image_spec' and 'pod_template' are mutually exclusive.")
        if provisioned and label_selector is not None:
            raise ValueError("'label_selector' cannot be customized when provisioning.")
        if provisioned and pod_rank_label != RANK_LABEL:
            raise ValueError("'pod_rank_label' cannot be customized when provisioning.")
        if not provisioned and labels is not None:
            raise ValueError("'labels' can only be set when provisioning.")
        if not provisioned and annotations is not None:
            raise ValueError("'annotations' can only be set when provisioning.")
        template: dict[str, Any] | None = None
        if image_spec is not None:
            template = worker_pod_template(image_spec, port)
        elif pod_template is not None:
            template = _plain(pod_template)
        self._meshes[name] = {
            "num_replicas": num_replicas,
            "label_selector": label_selector or _selector(name),
            "pod_rank_label": pod_rank_label,
            "port": port,
            "provisioned": provisioned,
            "pod_template": template,
            "labels": dict(labels) if labels else None,
            "annotations": dict(annotations) if annotations else None,
        }

    @property
    def namespace(self) -> str:
        """The namespace every mesh lives in."""
        return self._namespace

    # -- manifests ----------------------------------------------------------------------

    def manifests(self, name: str) -> list[dict[str, Any]]:
        """The objects ``apply`` creates for a provisioned mesh, as plain dicts.

        Args:
            name: the mesh's name.

        Returns:
            The mesh's Secret, headless Service and StatefulSet, in that
            order; an empty list for an attach-only mesh.

        Raises:
            KeyError: the job has no mesh of that name.
        """
        mesh = self._meshes.get(name)
        if mesh is None:
            raise KeyError(f"no mesh {name!r}; meshes: {', '.join(self._meshes) or 'none'}")
        if not mesh["provisioned"]:
            return []
        return [
            secret_manifest(name, self._namespace, self._secret or "<made by apply()>"),
            service_manifest(name, self._namespace, mesh["port"]),
            stateful_set_manifest(
                name,
                self._namespace,
                mesh["num_replicas"],
                mesh["pod_template"],
                mesh["port"],
                labels=mesh["labels"],
                annotations=mesh["annotations"],
            ),
        ]

    # -- the lifecycle ------------------------------------------------------------------

    def _apis(self) -> tuple[Any, Any, Any]:
        k8s = _kubernetes()
        api = self._kubeconfig.api_client()
        return k8s, k8s.client.CoreV1Api(api), k8s.client.AppsV1Api(api)

    def _create(self, client_script: str | None) -> None:
        if client_script is not None:
            raise JobError("KubernetesJob cannot run a client script: run it in a pod yourself")
        if not self._meshes:
            raise ValueError("At least one mesh must be added using add_mesh()")
        provisioned = [name for name, mesh in self._meshes.items() if mesh["provisioned"]]
        if not provisioned:
            return
        self._secret = secret_for_workers()
        k8s, core, apps = self._apis()
        for name in provisioned:
            secret, service, stateful_set = self.manifests(name)
            for kind, create, replace, body in (
                ("Secret", core.create_namespaced_secret, core.replace_namespaced_secret, secret),
                ("Service", core.create_namespaced_service, None, service),
                (
                    "StatefulSet",
                    apps.create_namespaced_stateful_set,
                    apps.replace_namespaced_stateful_set,
                    stateful_set,
                ),
            ):
                object_name = body["metadata"]["name"]
                try:
                    create(namespace=self._namespace, body=body)
                    log.info("created %s %s/%s", kind, self._namespace, object_name)
                except k8s.ApiException as error:
                    if error.status == 409 and replace is not None:
                        replace(name=object_name, namespace=self._namespace, body=body)
                        log.info("replaced %s %s/%s", kind, self._namespace, object_name)
                    elif error.status == 409:
                        log.info("%s %s/%s exists already", kind, self._namespace, object_name)
                    else:
                        raise JobError(
                            f"the Kubernetes API refused to create {kind} "
                            f"{self._namespace}/{object_name}: {error.status} {error.reason}: "
                            f"{_api_message(error)}"
                        ) from None

    def _ready_pods(self, name: str, timeout: int | None) -> list[_Pod]:
        """Wait for pods ``0..N-1`` of mesh ``name`` to be Ready; by rank."""
        mesh = self._meshes[name]
        wanted, selector, rank_label = (
            mesh["num_replicas"],
            mesh["label_selector"],
            mesh["pod_rank_label"],
        )
        k8s, core, _ = self._apis()
        ready: dict[int, _Pod] = {}
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(1, int(deadline - time.monotonic()))
            stream = k8s.watch.Watch()
            arguments: dict[str, Any] = {"namespace": self._namespace, "label_selector": selector}
            if left is not None:
                arguments["timeout_seconds"] = left
            try:
                for event in stream.stream(core.list_namespaced_pod, **arguments):
                    kind, pod = event["type"], event.get("raw_object") or {}
                    if kind == "ERROR":
                        raise JobError(f"watching the pods of mesh {name!r} failed: {pod}")
                    rank = _rank(pod, rank_label)
                    if rank is None or not 0 <= rank < wanted:
                        continue
                    if kind != "DELETED" and _is_ready(pod):
                        ip = (pod.get("status") or {}).get("podIP")
                        if ip:
                            pod_name = pod["metadata"]["name"]
                            ready[rank] = _Pod(pod_name, ip, _port_of(pod, mesh["port"]))
                    else:
                        ready.pop(rank, None)
                    if len(ready) == wanted:
                        stream.stop()
                        return [ready[r] for r in range(wanted)]
            except k8s.ApiException as error:
                raise JobError(
                    f"cannot watch the pods of mesh {name!r} in namespace {self._namespace!r}: "
                    f"{error.status} {error.reason}: {_api_message(error)}"
                ) from None
            finally:
                stream.stop()
            if deadline is not None and time.monotonic() >= deadline:
                missing = sorted(set(range(wanted)) - set(ready))
                raise JobError(
                    f"mesh {name!r}: only {len(ready)} of {wanted} pods were Ready within "
                    f"{timeout} s (missing ranks {missing}, selector {selector!r}); look at "
                    f"`kubectl -n {self._namespace} get pods -l {selector}` and their events"
                )

    def _state(self) -> JobState:
        adopt_secret(self._secret, "this KubernetesJob")
        hosts = {}
        for name in self._meshes:
            pods = self._ready_pods(name, self._timeout)
            log.info("mesh %s: pods %s", name, ", ".join(p.name for p in pods))
            hosts[name] = attach_to_workers(
                name=name,
                ca="trust_all_connections",
                workers=[f"tcp://{_host(p.ip)}:{p.port}" for p in pods],
            )
        return JobState(hosts)

    def can_run(self, spec: JobTrait) -> bool:
        """Tell whether this running job can serve ``spec``.

        It can with the same namespace and meshes while every mesh's pods
        are Ready (each mesh checked for up to 5 s).

        Args:
            spec: the job a script asks for.

        Returns:
            True if this job can stand in for ``spec``.
        """
        if not (
            isinstance(spec, KubernetesJob)
            and spec._namespace == self._namespace
            and spec._meshes == self._meshes
            and self.active
        ):
            return False
        try:
            for name in self._meshes:
                self._ready_pods(name, 5)
        except (JobError, ImportError):
            return False
        return True

    def _check_killable(self) -> None:
        if not any(mesh["provisioned"] for mesh in self._meshes.values()):
            raise Unsupported(
                "KubernetesJob cannot end pods it did not create (every mesh is attach-only): "
                "delete them the way they were made"
            )

    def _kill(self) -> None:
        self._check_killable()
        provisioned = [name for name, mesh in self._meshes.items() if mesh["provisioned"]]
        k8s, core, apps = self._apis()
        for name in provisioned:
            for kind, delete, object_name in (
                ("StatefulSet", apps.delete_namespaced_stateful_set, name),
                ("Service", core.delete_namespaced_service, f"{name}-svc"),
                ("Secret", core.delete_namespaced_secret, _secret_name(name)),
            ):
                try:
                    delete(name=object_name, namespace=self._namespace)
                    log.info("deleted %s %s/%s", kind, self._namespace, object_name)
                except k8s.ApiException as error:
                    if error.status != 404:
                        raise JobError(
                            f"cannot delete {kind} {self._namespace}/{object_name}: "
                            f"{error.status} {error.reason}: {_api_message(error)}"
                        ) from None

    def __repr__(self) -> str:
        return f"KubernetesJob(namespace={self._namespace!r}, meshes={list(self._meshes)})"


# -- manifests ---------------------------------------------------------------------------


def _selector(name: str) -> str:
    return ",".join(f"{k}={v}" for k, v in {**WORKER_LABELS, MESH_LABEL: name}.items())


def _secret_name(name: str) -> str:
    return f"{name}-monarch-secret"


def worker_pod_template(image_spec: ImageSpec, port: int) -> dict[str, Any]:
    """The pod template of a mesh provisioned from an ``ImageSpec``.

    Its one container runs ``python -m monarch_launcher worker`` at
    ``tcp://$(POD_IP):port``. It has no readiness probe: a probe's bare
    connection would be logged by the worker as an unauthenticated peer every
    period; the controller's attach retries until the worker listens instead.

    Args:
        image_spec: the container's image and resources.
        port: the port the worker listens on.

    Returns:
        The template as a plain dict (a ``V1PodTemplateSpec``'s fields).
    """
    container: dict[str, Any] = {
        "name": "worker",
        "image": image_spec.image,
        "command": [
            "python",
            "-u",
            "-m",
            "monarch_launcher",
            "worker",
            "--address",
            f"tcp://$(POD_IP):{port}",
        ],
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "MONARCH_PORT", "value": str(port)},
        ],
        "ports": [{"name": "monarch", "containerPort": port, "protocol": "TCP"}],
    }
    if image_spec.resources is not None:
        amounts = {str(k): str(v) for k, v in image_spec.resources.items()}
        container["resources"] = {"requests": amounts, "limits": dict(amounts)}
    return {"spec": {"containers": [container]}}


def secret_manifest(name: str, namespace: str, secret: str) -> dict[str, Any]:
    """The Secret that holds the job secret of a provisioned mesh's workers.

    Args:
        name: the mesh's name; the Secret is ``<name>-monarch-secret``.
        namespace: the mesh's namespace.
        secret: the job secret the workers and the controller share.

    Returns:
        The Secret manifest as a plain dict.
    """
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": _secret_name(name),
            "namespace": namespace,
            "labels": {**WORKER_LABELS, MESH_LABEL: name},
        },
        "type": "Opaque",
        "stringData": {_SECRET_KEY: secret},
    }


def service_manifest(name: str, namespace: str, port: int) -> dict[str, Any]:
    """The headless Service ``<name>-svc`` that gives a mesh's pods DNS names.

    Args:
        name: the mesh's name.
        namespace: the mesh's namespace.
        port: the port the workers listen on.

    Returns:
        The Service manifest as a plain dict.
    """
    labels = {**WORKER_LABELS, MESH_LABEL: name}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"{name}-svc", "namespace": namespace, "labels": labels},
        "spec": {
            "clusterIP": "None",
            "selector": labels,
            "publishNotReadyAddresses": True,
            "ports": [{"name": "monarch", "port": port, "targetPort": port}],
        },
    }


def stateful_set_manifest(
    name: str,
    namespace: str,
    replicas: int,
    template: dict[str, Any],
    port: int,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The StatefulSet of a provisioned mesh.

    Its pods start in parallel; each is labelled with the mesh and gets the
    job secret from the mesh's Secret (``secret_manifest``).

    Args:
        name: the mesh's name, also the StatefulSet's.
        namespace: the mesh's namespace.
        replicas: how many pods.
        template: the pod template (a plain dict or a Kubernetes model),
            e.g. from ``worker_pod_template``.
        port: the port the workers listen on (not used here: the template
            already sets the containers' ports).
        labels: labels added to the StatefulSet itself.
        annotations: annotations added to the StatefulSet itself.

    Returns:
        The StatefulSet manifest as a plain dict.

    Raises:
        ValueError: the template has no container.
    """
    pod_labels = {**WORKER_LABELS, MESH_LABEL: name}
    pod = _plain(template) or {}
    metadata = dict(pod.get("metadata") or {})
    metadata["labels"] = {**(metadata.get("labels") or {}), **pod_labels}
    spec = dict(pod.get("spec") or {})
    secret_env = {
        "name": SECRET_ENV,
        "valueFrom": {"secretKeyRef": {"name": _secret_name(name), "key": _SECRET_KEY}},
    }
    containers = []
    for container in spec.get("containers") or []:
        env = [e for e in container.get("env") or [] if e.get("name") != SECRET_ENV]
        containers.append({**container, "env": [*env, secret_env]})
    if not containers:
        raise ValueError(f"mesh {name!r}: the pod template has no container")
    spec["containers"] = containers
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {**pod_labels, **(labels or {})},
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": meta,
        "spec": {
            "replicas": replicas,
            "serviceName": f"{name}-svc",
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": pod_labels},
            "template": {"metadata": metadata, "spec": spec},
        },
    }


# -- reading pods ------------------------------------------------------------------------


def _rank(pod: dict[str, Any], label: str) -> int | None:
    value = ((pod.get("metadata") or {}).get("labels") or {}).get(label)
    try:
        return int(value) if value is not None else None
    except ValueError:
        log.warning(
            "pod %s has a non-numeric rank label %s=%r", pod["metadata"].get("name"), label, value
        )
        return None


def _is_ready(pod: dict[str, Any]) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def _port_of(pod: dict[str, Any], default: int) -> int:
    for container in (pod.get("spec") or {}).get("containers") or []:
        for env in container.get("env") or []:
            if env.get("name") == "MONARCH_PORT" and env.get("value"):
                try:
                    return int(env["value"])
                except ValueError:
                    break
    return default


def _host(ip: str) -> str:
    return f"[{ip}]" if ":" in ip else ip


def _api_message(error: Any) -> str:
    body = getattr(error, "body", None)
    try:
        return str(json.loads(body or "").get("message", body))
    except (ValueError, TypeError, AttributeError):
        return str(body or error)
