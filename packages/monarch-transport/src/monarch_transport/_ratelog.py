"""Warnings about peers that fail to authenticate, at most one line per peer
host every few seconds: a controller retrying with another job's secret (or
a scanner) must not flood a listener's log, and one line still says who and
why, with how many like it were left out since."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Any

__all__ = ["PeerLog"]

EVERY = 10.0  # seconds between two lines about one peer host
KEEP = 1024  # peer hosts remembered (the oldest is forgotten first)


class PeerLog:
    """Rate-limited warnings, keyed by the peer's host."""

    def __init__(self, logger: logging.Logger, every: float = EVERY) -> None:
        self.logger = logger
        self.every = every
        self.seen: OrderedDict[str, list[float]] = OrderedDict()  # host -> [last, left out]

    def warning(self, host: str, message: str, *args: Any) -> None:
        now = time.monotonic()
        entry = self.seen.get(host)
        if entry is not None and now - entry[0] < self.every:
            entry[1] += 1
            return
        left_out = int(entry[1]) if entry is not None else 0
        self.seen[host] = [now, 0]
        self.seen.move_to_end(host)
        while len(self.seen) > KEEP:
            self.seen.popitem(last=False)
        if left_out:
            message += " (and %d more from %s in the last %.0f s, not logged)"
            args = (*args, left_out, host or "this host", self.every)
        self.logger.warning(message, *args)


def peer_host(transport: Any) -> str:
    """The host of the far end of an asyncio transport ('' for a Unix socket)."""
    try:
        name = transport.get_extra_info("peername") if transport is not None else None
    except Exception:  # a closed transport: no name
        return ""
    if isinstance(name, tuple) and name:
        return str(name[0])
    return ""
