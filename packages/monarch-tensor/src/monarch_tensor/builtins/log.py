"""Logging on every process of the active mesh, from the controller:
``log_remote(msg, *args)`` logs ``msg % args`` on each process (a
distributed tensor argument arrives as that process's shard), with the
logger ``monarch.builtins.log``; its output reaches this terminal with the
rest of the processes' output.
"""

from __future__ import annotations

import logging
from typing import Any

from .._remote import remote

__all__ = ["LOGGER_NAME", "log_remote", "logger", "set_logging_level_remote"]

LOGGER_NAME = "monarch.builtins.log"
"""The name of the logger ``log_remote`` writes to on each process."""

logger = logging.getLogger(LOGGER_NAME)
"""The logger ``log_remote`` writes to (each process has its own)."""


def _log(*args: Any, level: int = logging.WARNING, **kwargs: Any) -> None:
    logger.log(level, *args, **kwargs)


def _set_level(level: int) -> None:
    logger.setLevel(level)


log_remote = remote(_log, propagate="inspect")
"""``log_remote(msg, *args, level=logging.WARNING, **kwargs)``: log on every
process of the active mesh, as ``logging.Logger.log(level, msg, *args)``
there. Returns ``None`` at once; the message is logged in order with the
stream's other work."""

set_logging_level_remote = remote(_set_level, propagate="inspect")
"""``set_logging_level_remote(level)``: set the level of ``log_remote``'s
logger on every process of the active mesh (messages below it are dropped)."""
