"""The actor runtime's wire protocol, in one place: every kind of message
between processes, the keys of its msgpack header, and the functions that
build each header. docs/concepts/internals.md shows how they flow.

A message is a list of frames: ``frames[0]`` is the msgpack header, the rest
is the pickled payload (monarch_transport's codec). The control loop of the
receiving process reads only the header to route a message; the payload is
unpickled by whoever the message is for, on its own thread.

Keys are one or two letters because every message carries them: a call to
one actor has a header of about 100 bytes.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

__all__ = ["Kind", "Op", "Key", "call_header", "port_header", "ready_header"]


class Kind(StrEnum):
    """What a message is (the header's ``k``); the receiver's router picks its handler by it."""

    CALL = "c"  # for an actor (spawn, call, stop), cast down a multicast tree
    PORT = "p"  # a value (or a failure) for a port: replies, Port.send
    READY = "r"  # a new proc tells its owner where it listens
    TABLE = "t"  # the owner tells every proc of a mesh all of the mesh's addresses
    STOP_PROC = "q"  # stop every actor of this proc, answer, exit
    LOGS = "l"  # lines a proc printed, for its owner to show
    LOG_MODE = "g"  # a proc starts or stops forwarding its output
    FAILURE = "f"  # a failure, for the supervision tree of the owner's process
    HEARTBEAT = "h"  # a proc is alive
    SINGLETON = "n"  # get_or_spawn_controller, asked of the controller
    HOST = "w"  # a controller asks a worker's host agent (spawn, kill, stop, shutdown)
    HOST_EVENT = "e"  # a worker tells its controller (spawned, exited, alive, stopped)
    SKIP = "z"  # a sender's numbered message for an actor here will never come (see ordering)
    INSPECT = "i"  # what is this process doing (its actors, stacks, a ping), for the mesh admin


class Op(StrEnum):
    """What a ``Kind.CALL`` message asks of its actor (the header's ``op``)."""

    SPAWN = "spawn"  # construct the actor (the payload: class, args, kwargs, info)
    CALL = "call"  # run an endpoint (the payload: args, kwargs)
    STOP = "stop"  # stop the actor: its owned meshes stop, __cleanup__ runs


class Key:
    """Header keys. Every message has ``KIND``; the others belong to some kinds."""

    KIND = "k"
    # Kind.CALL
    OP = "op"
    ACTOR = "a"  # the actor mesh's key (unique per spawn)
    NAME = "n"  # the actor mesh's name, for messages
    METHOD = "m"  # the endpoint's name
    REPLY_TO = "p"  # [address, port id] of the caller's port; absent: nobody waits
    BRANCH = "b"  # [first, stop): the positions this message's subtree covers
    DESTS = "d"  # the addresses of positions first..stop-1
    ORIGIN = "og"  # the sending process's id (its numbering of messages, see ordering)
    SEQS = "sq"  # the message's number for each of DESTS (per address and actor)
    SHAPE = "s"  # [labels, offset, sizes, strides] of the mesh the message was sent to
    WHY = "why"  # the reason of a stop
    PLAIN = "plain"  # a method without @endpoint (as_endpoint)
    EXPLICIT_PORT = "xp"  # ... that takes its response port first
    ASYNC = "async"  # spawn: the actor is async
    OWNER = "o"  # spawn: the address of the owner's process
    OWNER_ACTOR = "oa"  # spawn: the owning actor's key there
    TABLE = "t"  # spawn: the proc mesh's id
    KEEP = "kp"  # call: the result stays on the receiving process (the "keep" extension)
    # Kind.PORT
    PORT_ID = "pid"
    RANK = "r"  # the position the value is for (the sender's rank in the call)
    FAILED = "x"  # present: the payload is an exception to raise
    # Kind.STOP_PROC
    LEAVE_BUSY = "lb"  # present: actors busy in a message are not waited for (the owner exits)
    # Kind.READY, Kind.TABLE, Kind.HEARTBEAT, Kind.LOGS
    MESH = "mesh"
    ADDRESS = "addr"
    PID = "pid"
    FD = "fd"
    PROC = "proc"
    # Kind.HOST, Kind.HOST_EVENT
    HOST_OP = "ho"  # what is asked or told: spawn, kill, stop, shutdown / spawned, exited, ...
    REQUEST = "rq"  # the controller's number for a spawn, echoed in its events
    CODE = "code"  # an exit status


def port_header(pid: int, rank: int = 0, failed: bool = False) -> dict[str, Any]:
    """A value for port ``pid`` (a reply to position ``rank``, or ``Port.send``)."""
    header: dict[str, Any] = {Key.KIND: Kind.PORT, Key.PORT_ID: pid, Key.RANK: rank}
    if failed:
        header[Key.FAILED] = 1
    return header


def call_header(
    op: Op, actor: str, name: str, reply_to: list[Any] | None = None, **extra: Any
) -> dict[str, Any]:
    """A message for every actor of mesh ``actor`` (the router adds the tree's keys)."""
    header: dict[str, Any] = {Key.KIND: Kind.CALL, Key.OP: op, Key.ACTOR: actor, Key.NAME: name}
    if reply_to is not None:
        header[Key.REPLY_TO] = reply_to
    header.update(extra)
    return header


def ready_header(mesh: str, rank: int, address: str, pid: int) -> dict[str, Any]:
    """A proc's first message to its owner: rank ``rank`` of ``mesh`` listens at ``address``."""
    return {
        Key.KIND: Kind.READY,
        Key.MESH: mesh,
        Key.RANK: rank,
        Key.ADDRESS: address,
        Key.PID: pid,
    }
