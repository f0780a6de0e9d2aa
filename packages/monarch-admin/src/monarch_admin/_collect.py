"""The job as the admin shows it: every process reachable from the controller
(the proc meshes it started, then the ones they started), grouped by host,
each with its actors; probes of every process; a process's stacks."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from monarch_actor import Future
from monarch_actor.extension import inspect_process, process_address

__all__ = ["diagnostics", "is_down", "stacks", "topology"]

DEFAULT_TIMEOUT = 5.0  # seconds one process may take to answer
MAX_DEPTH = 8  # proc meshes started by procs started by procs...


def _controller() -> str:
    address = process_address()
    if address is None:
        raise RuntimeError(
            "no actor runtime is running in this process: the mesh admin serves the job "
            "of the script that starts it (spawn something first, or call enable_admin() "
            "after this_host())"
        )
    return address


def _ask(addresses: Iterable[str], what: str, timeout: float, **options: Any) -> dict[str, Any]:
    """Ask every process at once; the answer or the error, by address."""
    futures = {address: inspect_process(address, what, **options) for address in addresses}
    return _wait(futures, timeout)


def _wait(futures: dict[str, Future[Any]], timeout: float) -> dict[str, Any]:
    """The answer or the error of each future, waiting ``timeout`` seconds in all."""
    answers: dict[str, Any] = {}
    deadline = time.monotonic() + timeout
    for address, future in futures.items():
        try:
            answers[address] = future.get(timeout=max(0.0, deadline - time.monotonic()))
        except Exception as error:
            answers[address] = {"error": f"{type(error).__name__}: {error}"}
    return answers


def is_down(process: dict[str, Any]) -> bool:
    """Whether a process of ``topology()`` failed or ended without being asked to stop.

    Args:
        process: one process of ``topology()``'s hosts.
    """
    return process.get("status") in ("failed", "exited") or "error" in process


def _procs_of(snapshot: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(mesh, proc) for mesh in snapshot.get("proc_meshes", []) for proc in mesh["procs"]]


def topology(*, events: bool = False, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
    """Hosts, their processes and each process's actors, as plain data.

    Args:
        events: include each actor's recent events (its flight recorder).
        timeout: how long to wait for each round of answers, in seconds.

    Returns:
        ``{"controller": ..., "hosts": [{"host", "procs": [...]}], "summary": {...}}``;
        a process that did not answer carries ``"error"``.

    Raises:
        RuntimeError: no actor runtime runs in this process.
    """
    root = _controller()
    controller = _ask([root], "snapshot", timeout, events=events)[root]
    controller.update(mesh=None, rank=None, status="running")
    processes = [controller]
    frontier = [controller]
    seen = {root}
    for _ in range(MAX_DEPTH):
        wanted: dict[str, dict[str, Any]] = {}
        for parent in frontier:
            for mesh, proc in _procs_of(parent):
                address = proc["address"]
                if address and address not in seen:
                    seen.add(address)
                    wanted[address] = {
                        "mesh": mesh["name"],
                        "mesh_id": mesh["id"],
                        "rank": proc["rank"],
                        "status": proc["status"],
                        "pid": proc["pid"],
                        "host": proc["host"],
                        "owner": parent.get("address"),
                        "address": address,
                    }
        if not wanted:
            break
        live = [a for a, info in wanted.items() if info["status"] == "running"]
        answers = _ask(live, "snapshot", timeout, events=events)
        frontier = []
        for address, info in wanted.items():
            answer = answers.get(address)
            if answer is None:
                node = {**info, "actors": [], "proc_meshes": []}
            elif "error" in answer:
                node = {**info, "actors": [], "proc_meshes": [], "error": answer["error"]}
            else:
                node = {**answer, **{k: info[k] for k in ("mesh", "mesh_id", "rank", "status")}}
                node["owner"] = info["owner"]
                frontier.append(node)
            processes.append(node)
    hosts: dict[str, list[dict[str, Any]]] = {}
    for process in processes:
        hosts.setdefault(process.get("host") or "?", []).append(process)
    actors = [actor for process in processes for actor in process.get("actors", [])]
    return {
        "at": time.time(),
        "controller": root,
        "hosts": [{"host": host, "procs": procs} for host, procs in hosts.items()],
        "summary": {
            "hosts": len(hosts),
            "procs": len(processes) - 1,
            "actors": len(actors),
            "failed_actors": sum(actor["status"] == "failed" for actor in actors),
            "failed_procs": sum(is_down(p) for p in processes),
            "messages": sum(actor["messages"] for actor in actors),
        },
    }


def diagnostics(*, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
    """Probe every process of the job with a round trip.

    Args:
        timeout: how long a process may take to answer, in seconds.

    Returns:
        ``{"ok": bool, "nodes": [{"address", "host", "name", "ok", "latency_ms", "error"}]}``.

    Raises:
        RuntimeError: no actor runtime runs in this process.
    """
    found = topology(timeout=timeout)
    nodes: list[dict[str, Any]] = []
    live: list[str] = []
    for host in found["hosts"]:
        for process in host["procs"]:
            node: dict[str, Any] = {
                "address": process["address"],
                "host": host["host"],
                "name": process.get("name") or f"{process.get('mesh')}[{process.get('rank')}]",
                "mesh": process.get("mesh"),
                "rank": process.get("rank"),
            }
            if process.get("status") not in (None, "running"):
                node.update(ok=False, latency_ms=None, error=f"process {process['status']}")
            else:
                live.append(process["address"])
            nodes.append(node)
    answered: dict[str, float] = {}  # each probe timed by its own answer, all sent at once
    started = time.perf_counter()
    probes = {address: inspect_process(address, "ping") for address in live}
    def timer(address: str) -> Callable[[Future[Any]], None]:
        def answered_now(_: Future[Any]) -> None:
            answered.setdefault(address, time.perf_counter())

        return answered_now

    for address, probe in probes.items():
        probe.add_done_callback(timer(address))
    answers = _wait(probes, timeout)
    for node in nodes:
        answer = answers.get(node["address"]) if "ok" not in node else None
        if answer is None:
            continue
        if "error" in answer:
            node.update(ok=False, latency_ms=None, error=answer["error"])
        else:
            # the callback may run just after the waiter woke: then now is as close
            latency = (answered.get(node["address"], time.perf_counter()) - started) * 1000
            node.update(ok=True, latency_ms=round(latency, 3), error=None)
    return {"at": time.time(), "ok": all(n["ok"] for n in nodes), "nodes": nodes}


def stacks(address: str, *, timeout: float = 30.0) -> dict[str, Any]:
    """The Python stacks of the process at ``address`` (py-spy when installed).

    Args:
        address: the process's runtime address (as in ``topology``).
        timeout: how long to wait, in seconds.

    Returns:
        ``{"source": "py-spy" | "python", "text": ..., "note": ...}``, or
        ``{"error": ...}`` when the process did not answer.
    """
    return dict(_ask([address], "stacks", timeout)[address])
