"""``monarch.job.spmd``: torchrun-style jobs, as in Monarch: ``serve`` starts
the hosts of a torchrun command or TorchX ``AppDef`` as an ``SPMDJob``
(``run_spmd()`` runs the script on every rank); ``StoreJob`` turns the ranks
of a running SPMD job into Monarch hosts. Re-exported from
``monarch_launcher.spmd``."""

from monarch_launcher.spmd import SPMDJob, StoreJob, serve

__all__ = ["SPMDJob", "StoreJob", "serve"]
