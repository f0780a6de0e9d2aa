"""torchrun-style programs on Monarch: ``monarch.spmd`` (``SPMDActor`` runs a
torchrun-style script on a mesh; ``setup_torch_elastic_env`` only sets
torchrun's environment) and ``monarch.job.spmd`` (``serve`` starts the hosts
of a torchrun command or TorchX ``AppDef`` as an ``SPMDJob``; ``StoreJob``
turns the ranks of a running SPMD job into Monarch hosts)."""

from ._spmd import AddrType, SPMDActor, setup_torch_elastic_env, setup_torch_elastic_env_async
from ._spmd_job import SPMDJob, StoreJob, serve

__all__ = [
    "AddrType",
    "SPMDActor",
    "SPMDJob",
    "StoreJob",
    "serve",
    "setup_torch_elastic_env",
    "setup_torch_elastic_env_async",
]
