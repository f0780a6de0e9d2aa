"""``monarch.spmd``: torchrun-style scripts on a mesh, as in Monarch."""

from monarch_launcher.spmd import SPMDActor, setup_torch_elastic_env, setup_torch_elastic_env_async

__all__ = ["SPMDActor", "setup_torch_elastic_env", "setup_torch_elastic_env_async"]
