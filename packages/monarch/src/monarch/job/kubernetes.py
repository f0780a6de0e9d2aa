"""``monarch.job.kubernetes``: ``KubernetesJob`` and its ``ImageSpec`` and
``KubeConfig``, as in Monarch, re-exported from ``monarch_launcher``."""

from monarch_launcher.kubernetes import ImageSpec, KubeConfig, KubernetesJob

__all__ = ["ImageSpec", "KubeConfig", "KubernetesJob"]
