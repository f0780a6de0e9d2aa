"""``monarch.job.kubernetes``'s names: ``KubernetesJob`` and how to describe
its pods' image and reach the cluster. The ``kubernetes`` package is needed
only to talk to a cluster (``pip install 'monarch-launcher[kubernetes]'``)."""

from ._kubernetes import (
    DEFAULT_PORT,
    MESH_LABEL,
    RANK_LABEL,
    WORKER_LABELS,
    ImageSpec,
    KubeConfig,
    KubernetesJob,
    secret_manifest,
    service_manifest,
    stateful_set_manifest,
    worker_pod_template,
)

__all__ = [
    "DEFAULT_PORT",
    "MESH_LABEL",
    "RANK_LABEL",
    "WORKER_LABELS",
    "ImageSpec",
    "KubeConfig",
    "KubernetesJob",
    "secret_manifest",
    "service_manifest",
    "stateful_set_manifest",
    "worker_pod_template",
]
