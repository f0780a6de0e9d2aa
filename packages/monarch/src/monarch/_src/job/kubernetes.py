"""``monarch._src.job.kubernetes``: Kubernetes jobs.

Exists for Monarch compatibility: Monarch's own examples and tests import ``ImageSpec``,
``KubeConfig``, ``KubernetesJob`` through this internal path. The objects are the public
ones of ``monarch.job.kubernetes``; new code should import from there.
"""

from monarch.job.kubernetes import (
    ImageSpec,
    KubeConfig,
    KubernetesJob,
)

__all__ = [
    "ImageSpec",
    "KubeConfig",
    "KubernetesJob",
]
