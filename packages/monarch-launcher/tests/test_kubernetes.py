"""KubernetesJob: the manifests it makes (plain unit tests), and its whole
life against fakekube.FakeKubernetes, a real HTTP server speaking enough of
the Kubernetes API for the real ``kubernetes`` client, whose fake kubelet
runs each pod's worker as a real process. (No real cluster here: see the
docs' note.)"""

import os
import pickle
import socket
import sys

import pytest
from launcher_actors import Probe

from monarch_launcher import ImageSpec, JobError, KubeConfig, KubernetesJob, Unsupported, job_loads
from monarch_launcher._procutil import LocalProcess
from monarch_launcher.kubernetes import (
    service_manifest,
    stateful_set_manifest,
    worker_pod_template,
)

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- manifests ----------------------------------------------------------------------------


def test_a_provisioned_mesh_is_a_secret_a_headless_service_and_a_stateful_set():
    job = KubernetesJob(namespace="ml")
    job.add_mesh(
        "trainers",
        4,
        image_spec=ImageSpec("ghcr.io/me/train:1", resources={"nvidia.com/gpu": 8}),
        labels={"team": "a"},
        annotations={"note": "x"},
    )
    secret, service, stateful_set = job.manifests("trainers")
    assert secret["kind"] == "Secret" and secret["metadata"]["name"] == "trainers-monarch-secret"
    assert service["spec"]["clusterIP"] == "None"
    assert service["metadata"]["name"] == "trainers-svc"
    assert service["spec"]["ports"] == [{"name": "monarch", "port": 26600, "targetPort": 26600}]
    labels = {
        "app.kubernetes.io/name": "monarch-worker",
        "monarch.pytorch.org/mesh-name": "trainers",
    }
    assert service["spec"]["selector"] == labels
    spec = stateful_set["spec"]
    assert stateful_set["metadata"]["labels"] == {**labels, "team": "a"}
    assert stateful_set["metadata"]["annotations"] == {"note": "x"}
    assert spec["replicas"] == 4 and spec["serviceName"] == "trainers-svc"
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["selector"] == {"matchLabels": labels}
    assert spec["template"]["metadata"]["labels"] == labels
    (container,) = spec["template"]["spec"]["containers"]
    assert container["image"] == "ghcr.io/me/train:1"
    assert container["command"][-4:] == [
        "monarch_launcher",
        "worker",
        "--address",
        "tcp://$(POD_IP):26600",
    ]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["MONARCH_JOB_SECRET"]["valueFrom"] == {
        "secretKeyRef": {"name": "trainers-monarch-secret", "key": "secret"}
    }
    assert container["resources"] == {
        "requests": {"nvidia.com/gpu": "8"},
        "limits": {"nvidia.com/gpu": "8"},
    }
    assert container["ports"] == [{"name": "monarch", "containerPort": 26600, "protocol": "TCP"}]


def test_a_users_pod_template_gets_the_labels_and_the_secret():
    template = {
        "metadata": {"labels": {"mine": "1"}},
        "spec": {
            "containers": [
                {
                    "name": "w",
                    "image": "i",
                    "env": [{"name": "MONARCH_JOB_SECRET", "value": "leak"}],
                },
                {"name": "sidecar", "image": "s"},
            ]
        },
    }
    made = stateful_set_manifest("m", "ns", 2, template, 26600)
    pod = made["spec"]["template"]
    assert pod["metadata"]["labels"]["mine"] == "1"
    assert pod["metadata"]["labels"]["monarch.pytorch.org/mesh-name"] == "m"
    for container in pod["spec"]["containers"]:
        (secret,) = [e for e in container["env"] if e["name"] == "MONARCH_JOB_SECRET"]
        assert "value" not in secret  # never a literal secret in the manifest
    with pytest.raises(ValueError, match="no container"):
        stateful_set_manifest("m", "ns", 1, {"spec": {}}, 1)
    assert service_manifest("m", "ns", 7)["spec"]["ports"][0]["port"] == 7


def test_a_pod_template_object_of_the_kubernetes_client_is_accepted():
    client = pytest.importorskip("kubernetes.client")
    template = client.V1PodTemplateSpec(
        spec=client.V1PodSpec(containers=[client.V1Container(name="w", image="img")])
    )
    job = KubernetesJob("ns")
    job.add_mesh("m", 1, pod_template=template)
    assert job.manifests("m")[2]["spec"]["template"]["spec"]["containers"][0]["image"] == "img"
    assert pickle.loads(pickle.dumps(job)).manifests("m") == job.manifests("m")


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("", "Empty"),
        ("a" * 64, "at most 63"),
        ("Trainers", "lowercase"),
        ("t-1", "lowercase"),
        ("1t", "start with an alphabetic"),
    ],
)
def test_mesh_names_follow_monarchs_rules(name, says):
    with pytest.raises(ValueError, match=says):
        KubernetesJob("ns").add_mesh(name, 1)


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"image_spec": ImageSpec("i"), "pod_template": {"spec": {}}}, "mutually exclusive"),
        ({"image_spec": ImageSpec("i"), "label_selector": "a=b"}, "label_selector"),
        ({"image_spec": ImageSpec("i"), "pod_rank_label": "x"}, "pod_rank_label"),
        ({"labels": {"a": "b"}}, "'labels' can only be set when provisioning"),
        ({"annotations": {"a": "b"}}, "'annotations' can only"),
        ({"port": 0}, "TCP port"),
    ],
)
def test_conflicting_mesh_options_are_refused(kwargs, says):
    with pytest.raises(ValueError, match=says):
        KubernetesJob("ns").add_mesh("m", 1, **kwargs)


def test_job_options_are_checked():
    with pytest.raises(Unsupported, match="attach_to"):
        KubernetesJob("ns", attach_to="tcp://x:1")
    with pytest.raises(ValueError, match="namespace"):
        KubernetesJob("")
    with pytest.raises(ValueError, match="whole number of seconds"):
        KubernetesJob("ns", timeout=0)
    with pytest.raises(KeyError, match="no mesh 'x'"):
        KubernetesJob("ns").manifests("x")
    assert (
        worker_pod_template(ImageSpec("i"), 5)["spec"]["containers"][0]["ports"][0]["containerPort"]
        == 5
    )


# -- against the fake API server -----------------------------------------------------------


@pytest.fixture
def cluster(monkeypatch):
    pytest.importorskip("kubernetes")
    from fakekube import FakeKubernetes

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    fake = FakeKubernetes()
    yield fake
    fake.close()


def connect(fake):
    from kubernetes import client

    configuration = client.Configuration()
    configuration.host = fake.url
    return KubeConfig.from_config(configuration)


def test_a_provisioned_mesh_runs_actors_on_its_pods_and_kill_deletes_everything(cluster, in_tmp):
    port = free_port()
    job = KubernetesJob("ml", timeout=60, kubeconfig=connect(cluster))
    job.add_mesh("trainers", 2, image_spec=ImageSpec("ghcr.io/me/train:1"), port=port)
    state = job.state()
    assert dict(state.trainers.extent.items()) == {"hosts": 2}
    creates = [(m, p) for m, p, _, _ in cluster.requests if m == "POST"]
    assert creates == [
        ("POST", "/api/v1/namespaces/ml/secrets"),
        ("POST", "/api/v1/namespaces/ml/services"),
        ("POST", "/apis/apps/v1/namespaces/ml/statefulsets"),
    ]
    secret = cluster.objects[("secrets", "ml", "trainers-monarch-secret")]
    assert secret["stringData"]["secret"] == os.environ["MONARCH_JOB_SECRET"]
    probes = state.trainers.spawn_procs(per_host={"gpus": 2}).spawn("p", Probe)
    ips = probes.env.call("POD_IP").get(timeout=60)
    pods = {p["metadata"]["name"]: p["status"]["podIP"] for p in cluster.pods("ml", "")}
    assert {point["hosts"]: ip for point, ip in ips.items()} == {
        0: pods["trainers-0"],
        1: pods["trainers-1"],
    }  # each host is its pod, in rank order
    assert pickle.loads(pickle.dumps(job)).active  # the job caches like any other
    workers = [LocalProcess.of(p.pid) for p in cluster.processes.values()]
    job.kill()
    deletes = sorted(p for m, p, _, _ in cluster.requests if m == "DELETE")
    assert deletes == [
        "/api/v1/namespaces/ml/secrets/trainers-monarch-secret",
        "/api/v1/namespaces/ml/services/trainers-svc",
        "/apis/apps/v1/namespaces/ml/statefulsets/trainers",
    ]
    assert all(w.wait_exit(30) for w in workers)
    assert not [key for key in cluster.objects if key[0] != "pods"]


def test_a_job_is_reused_from_its_cache_while_its_pods_are_ready(cluster, in_tmp):
    port = free_port()

    def spec():
        job = KubernetesJob("ml", timeout=60, kubeconfig=connect(cluster))
        job.add_mesh("workers", 1, image_spec=ImageSpec("img"), port=port)
        return job

    first = spec()
    first.state()
    second = spec()
    hosts = second.state().workers
    assert second.apply_id == first.apply_id
    assert [p for m, p, _, _ in cluster.requests if m == "POST"].count(
        "/apis/apps/v1/namespaces/ml/statefulsets"
    ) == 1
    assert hosts.spawn_procs().spawn("p", Probe).pid.call_one().get(timeout=60) > 0
    second.kill()


def test_attach_only_meshes_find_pods_by_label_and_rank(cluster, in_tmp):
    from monarch_launcher import ProcessJob

    workers = ProcessJob({"w": 2}, transport="tcp")  # the "pods", started by someone else
    workers.apply()
    try:
        for key, worker in workers.workers.items():
            host, port = worker.address.removeprefix("tcp://").rsplit(":", 1)
            rank = 1 - int(key.rsplit("_", 1)[1])  # ranks the other way round
            cluster.add_pod(
                "ml",
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"pod-{rank}",
                        "namespace": "ml",
                        "labels": {"app": "mine", "rank": str(rank)},
                    },
                    "spec": {
                        "containers": [
                            {
                                "name": "w",
                                "image": "i",
                                "env": [{"name": "MONARCH_PORT", "value": port}],
                            }
                        ]
                    },
                    "status": {"podIP": host, "conditions": [{"type": "Ready", "status": "True"}]},
                },
            )
        job = KubernetesJob("ml", timeout=30, kubeconfig=connect(cluster))
        job.add_mesh("mine", 2, label_selector="app=mine", pod_rank_label="rank")
        from monarch_launcher._secret import adopt_secret

        adopt_secret(workers._secret, "the pods")
        hosts = job.state(cached_path=None).mine
        pids = hosts.spawn_procs().spawn("p", Probe).pid.call().get(timeout=60)
        from launcher_actors import parent_of

        by_rank = {point["hosts"]: parent_of(parent_of(pid)) for point, pid in pids.items()}
        assert by_rank == {0: workers.workers["w_1"].pid, 1: workers.workers["w_0"].pid}
        assert not [m for m, *_ in cluster.requests if m == "POST"]  # nothing was created
        with pytest.raises(Unsupported, match="did not create"):
            job.kill()  # the pods are not ours to end: nothing is touched
        assert hosts.spawn_procs().spawn("q", Probe).pid.call().get(timeout=60)
        hosts.stop().get(timeout=30)
    finally:
        workers.kill()


def test_pods_that_never_get_ready_time_out_naming_the_missing_ranks(cluster, in_tmp):
    cluster.kubelet_runs_pods = False
    job = KubernetesJob("ml", timeout=2, kubeconfig=connect(cluster))
    job.add_mesh("slow", 2, image_spec=ImageSpec("img"), port=free_port())
    with pytest.raises(
        JobError, match=r"only 0 of 2 pods were Ready within 2 s \(missing ranks \[0, 1\]"
    ):
        job.state(cached_path=None)
    job.kill()


def test_the_api_refusing_says_what_and_why(cluster, in_tmp):
    cluster.refuse[("POST", "statefulsets")] = (403, "statefulsets is forbidden: no RBAC")
    job = KubernetesJob("ml", timeout=5, kubeconfig=connect(cluster))
    job.add_mesh("m", 1, image_spec=ImageSpec("img"))
    with pytest.raises(JobError, match=r"refused to create StatefulSet ml/m: 403.*no RBAC"):
        job.apply()


def test_an_existing_object_is_replaced(cluster, in_tmp):
    cluster.kubelet_runs_pods = False
    cluster.objects[("secrets", "ml", "m-monarch-secret")] = {
        "metadata": {"name": "m-monarch-secret"}
    }
    job = KubernetesJob("ml", kubeconfig=connect(cluster))
    job.add_mesh("m", 1, image_spec=ImageSpec("img"))
    job.apply()
    assert ("PUT", "/api/v1/namespaces/ml/secrets/m-monarch-secret") in [
        (m, p) for m, p, _, _ in cluster.requests
    ]
    job.kill()


def test_a_kubeconfig_file_reaches_the_cluster_with_its_credentials(cluster, in_tmp):
    cluster.kubelet_runs_pods = False
    path = cluster.kubeconfig(in_tmp / "config", token="s3cret-token")
    job = KubernetesJob("ml", kubeconfig=KubeConfig.from_path(path))
    job.add_mesh("m", 1, image_spec=ImageSpec("img"))
    job.apply()
    (headers,) = [h for m, p, _, h in cluster.requests if m == "POST" and p.endswith("/secrets")]
    assert {k.lower(): v for k, v in headers.items()}["authorization"] == "Bearer s3cret-token"
    job_loads(job.dumps()).kill()  # a job loaded elsewhere can end it
    assert ("statefulsets", "ml", "m") not in cluster.objects


def test_without_a_kubeconfig_outside_a_pod_the_error_says_what_to_pass(in_tmp, monkeypatch):
    pytest.importorskip("kubernetes")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    job = KubernetesJob("ml")
    job.add_mesh("m", 1, image_spec=ImageSpec("img"))
    with pytest.raises(JobError, match=r"not running in a pod.*KubeConfig.from_path"):
        job.apply()


def test_without_the_kubernetes_package_the_error_names_the_extra(monkeypatch, in_tmp):
    monkeypatch.setitem(sys.modules, "kubernetes", None)
    monkeypatch.setitem(sys.modules, "kubernetes.client", None)
    job = KubernetesJob("ml")
    job.add_mesh("m", 1, image_spec=ImageSpec("img"))
    assert job.manifests("m")  # manifests need no client
    with pytest.raises(ImportError, match=r"monarch-launcher\[kubernetes\]"):
        job.apply()
