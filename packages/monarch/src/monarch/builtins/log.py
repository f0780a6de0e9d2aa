"""``monarch.builtins.log``: logging on every process of the active mesh
(``monarch_tensor.builtins.log``)."""

from monarch_tensor.builtins.log import log_remote, logger, set_logging_level_remote

__all__ = ["log_remote", "logger", "set_logging_level_remote"]
