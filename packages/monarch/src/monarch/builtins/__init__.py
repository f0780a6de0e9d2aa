"""``monarch.builtins``: ready-made remote functions, as in Monarch: logging
on the processes (``monarch.builtins.log``) and their random generators
(``monarch.builtins.random``). Defined in ``monarch_tensor.builtins``."""

from monarch_tensor.builtins import log_remote, set_logging_level_remote

from . import log, random

__all__ = ["log", "log_remote", "random", "set_logging_level_remote"]
