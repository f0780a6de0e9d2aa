"""The ``[actor=...]`` prefix of Python ``logging`` records emitted inside
actors (switched by ``monarch_actor.config.prefix_python_logs_with_actor``):
a filter on every handler of the process, installed as its runtime is
wired. Beside ``logs``, the procs' output, where it ends up."""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any

import monarch_actor.config as switches  # the module itself: its attributes are read live

from .._core.current import current

__all__ = ["install_log_prefix"]

log = logging.getLogger("monarch.actor.telemetry")


class _ActorPrefix(logging.Filter):
    """Puts ``[actor=<the running actor>] `` before the message of a record
    emitted inside an actor. It sits on every handler, so the first handler
    that sees the record prefixes it (on the emitting thread, where the
    actor is known) and the others find it done."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "actor_prefix" in record.__dict__:
            return True
        try:
            if not switches.prefix_python_logs_with_actor:
                return True
            ctx = current()
            if ctx is None:
                return True
            prefix = f"[actor={ctx.actor_instance!r}] "
            record.actor_prefix = prefix
            # an empty message stays empty: torch.compile's structured trace
            # records require it
            if record.msg:
                record.msg = f"{prefix}{record.msg}"
        except Exception as error:  # a failing prefix must not lose the record
            record.actor_prefix = ""
            log.debug("could not prefix a log record with its actor: %r", error)
        return True


_FILTER = _ActorPrefix()
_prefix_lock = threading.Lock()
_prefix_installed = False


def install_log_prefix() -> None:
    """Put the actor prefix filter on every logging handler of this process:
    those that exist now (every logger's and ``logging.lastResort``, which
    prints records no handler took) and every one added later with
    ``Logger.addHandler`` (``basicConfig``, ``dictConfig``, pytest's)."""
    global _prefix_installed
    with _prefix_lock:
        if _prefix_installed:
            return
        _prefix_installed = True
        loggers: list[Any] = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
        for logger in loggers:
            for handler in list(getattr(logger, "handlers", ())):  # placeholders have none
                handler.addFilter(_FILTER)
        if logging.lastResort is not None:
            logging.lastResort.addFilter(_FILTER)
        add_handler = logging.Logger.addHandler

        @functools.wraps(add_handler)
        def add_handler_prefixing(self: logging.Logger, hdlr: logging.Handler) -> None:
            add_handler(self, hdlr)
            hdlr.addFilter(_FILTER)  # a no-op when the handler has it already

        setattr(logging.Logger, "addHandler", add_handler_prefixing)  # noqa: B010
