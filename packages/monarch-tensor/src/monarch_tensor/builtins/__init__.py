"""Ready-made remote functions (Monarch's ``monarch.builtins``): logging on
the processes (``log``) and their random number generators (``random``).
Each is a ``remote`` function: call it under an active mesh and it runs on
every process, in order with the tensor operations of the active stream.
"""

from .log import log_remote, set_logging_level_remote

__all__ = ["log_remote", "set_logging_level_remote"]
