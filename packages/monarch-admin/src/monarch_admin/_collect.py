"""The job as the admin shows it: every process reachable from the controller
(the proc meshes it started, then the ones they started), grouped by host,
each with its actors; probes of every process; a process's stacks."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from monarch_actor import Future
from monarch_actor.extension import inspect_process, process_address

__all__ = ["diagnostics", "is_down", "stacks", "summarize", "topology"]

DEFAULT_TIMEOUT = 5.0  # seconds one process may take to answer
MAX_DEPTH = 8  # proc meshes started by procs started by procs...
SLOW_MS = 500.0  # a probe answered slower than this is "slow" (Monarch's threshold)

# each process's last answer, by address: what a process that died is shown
# with (its name, pid and actors), as long as its proc mesh lists it
_last_seen: dict[str, dict[str, Any]] = {}
_last_seen_lock = threading.Lock()


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


def _remember(address: str, answer: dict[str, Any]) -> None:
    kept = {k: answer.get(k) for k in ("name", "pid", "host", "kind", "started_at")}
    kept["actors"] = [
        {k: v for k, v in actor.items() if k != "events"} for actor in answer.get("actors", [])
    ]
    kept["at"] = time.time()
    with _last_seen_lock:
        _last_seen[address] = kept


def _forget_except(addresses: set[str]) -> None:
    with _last_seen_lock:
        for address in [a for a in _last_seen if a not in addresses]:
            del _last_seen[address]


def _as_last_seen(info: dict[str, Any], answer: dict[str, Any] | None) -> dict[str, Any]:
    """A process that did not answer (it is down, or did not answer in time),
    shown as it was last seen: its name, pid and actors. The actors of a
    process that died failed with it."""
    node: dict[str, Any] = {**info, "actors": [], "proc_meshes": []}
    if answer is not None:
        node["error"] = answer["error"]
    with _last_seen_lock:
        last = _last_seen.get(info["address"])
    if last is None:
        return node
    node.update(
        name=last["name"],
        pid=info["pid"] or last["pid"],
        kind=last["kind"],
        started_at=last["started_at"],
        last_seen=last["at"],
    )
    node["host"] = info["host"] or last["host"]
    status = info["status"]
    actors = [dict(actor) for actor in last["actors"]]
    if status in ("exited", "failed"):
        why = f"its process {last['name']} (pid {node['pid']}) " + (
            "exited without being asked to stop" if status == "exited" else "failed"
        )
        for actor in actors:
            if actor.get("status") not in ("failed", "stopped"):
                actor.update(status="failed", reason=why, current="", current_for=0.0)
    elif status == "stopped":
        for actor in actors:
            if actor.get("status") != "failed":
                actor.update(status="stopped", reason="its process was stopped", current="")
    node["actors"] = actors
    return node


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
            if answer is None or "error" in answer:
                node = _as_last_seen(info, answer)
            else:
                node = {**answer, **{k: info[k] for k in ("mesh", "mesh_id", "rank", "status")}}
                node["owner"] = info["owner"]
                _remember(address, answer)
                frontier.append(node)
            processes.append(node)
    _forget_except(seen)
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


def _outcome(latency_ms: float | None, error: str | None) -> str:
    if error is not None or latency_ms is None:
        return "fail"
    return "slow" if latency_ms >= SLOW_MS else "pass"


def diagnostics(*, timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
    """Probe every node of the job: each process with a round trip that asks
    for its actors, and each of those actors, as Monarch's diagnostics do.

    Checks are in two phases: ``admin_infra`` (the controller, host workers
    and system actors: what the admin itself needs) and ``mesh`` (the procs
    the script spawned and their actors). A process stopped on request is
    not probed; one that exited without being asked fails its check. Each
    check passes, is ``slow`` (answered in ``SLOW_MS``, 500 ms, or more) or
    fails (no answer, or its process is down). A failed actor still answers:
    its check passes and says ``status: failed`` with the reason;
    ``summary.failed_actors`` counts them.

    Args:
        timeout: how long a process may take to answer, in seconds.

    Returns:
        ``{"ok", "nodes": [one per process: "address", "host", "name", "ok",
        "latency_ms", "error"], "checks": [one per process and actor:
        "label", "reference", "node", "phase", "outcome", "latency_ms",
        "error"], "summary": {...}}``; ``ok`` is whether every check passed
        or was slow.

    Raises:
        RuntimeError: no actor runtime runs in this process.
    """
    found = topology(timeout=timeout)
    nodes: list[dict[str, Any]] = []
    live: list[str] = []
    processes: list[dict[str, Any]] = []
    for host in found["hosts"]:
        for process in host["procs"]:
            if process.get("status") == "stopped":
                continue  # stopped on request: nothing to probe, nothing wrong
            node: dict[str, Any] = {
                "address": process["address"],
                "host": host["host"],
                "name": process.get("name") or f"{process.get('mesh')}[{process.get('rank')}]",
                "mesh": process.get("mesh"),
                "rank": process.get("rank"),
                "kind": process.get("kind") or "proc",
            }
            if process.get("status") not in (None, "running"):
                node.update(ok=False, latency_ms=None, error=f"process {process['status']}")
            else:
                live.append(process["address"])
            nodes.append(node)
            processes.append(process)
    answered: dict[str, float] = {}  # each probe timed by its own answer, all sent at once
    started = time.perf_counter()
    probes = {address: inspect_process(address, "snapshot") for address in live}

    def timer(address: str) -> Callable[[Future[Any]], None]:
        def answered_now(_: Future[Any]) -> None:
            answered.setdefault(address, time.perf_counter())

        return answered_now

    for address, probe in probes.items():
        probe.add_done_callback(timer(address))
    answers = _wait(probes, timeout)
    checks: list[dict[str, Any]] = []
    for node, process in zip(nodes, processes, strict=True):
        answer = answers.get(node["address"]) if "ok" not in node else None
        if answer is not None and "error" in answer:
            node.update(ok=False, latency_ms=None, error=answer["error"])
        elif answer is not None:
            # the callback may run just after the waiter woke: then now is as close
            latency = (answered.get(node["address"], time.perf_counter()) - started) * 1000
            node.update(ok=True, latency_ms=round(latency, 3), error=None)
        system = node["kind"] != "proc"
        checks.append(
            {
                "label": node["name"],
                "reference": node["address"],
                "node": node["kind"],
                "phase": "admin_infra" if system else "mesh",
                "host": node["host"],
                "outcome": _outcome(node["latency_ms"], node["error"]),
                "latency_ms": node["latency_ms"],
                "error": node["error"],
            }
        )
        now = {
            (actor["key"], actor["rank"]): actor
            for actor in (answer or {}).get("actors", [])
            if isinstance(answer, dict) and "error" not in answer
        }
        for actor in process.get("actors", []):
            if actor.get("status") == "stopped":
                continue  # stopped on request: nothing to probe
            fresh = now.get((actor["key"], actor["rank"]))
            if node["ok"] and fresh is None:
                continue  # stopped since the topology was taken
            current = fresh or actor
            error = None if node["ok"] else f"its process {node['name']}: {node['error']}"
            checks.append(
                {
                    "label": f"{actor['name']}[{actor['rank']}]",
                    "reference": f"{node['address']}#{actor['key']}/{actor['rank']}",
                    "node": "actor",
                    "phase": "admin_infra" if system or actor["name"].startswith("_") else "mesh",
                    "host": node["host"],
                    "process": node["name"],
                    "class": current.get("class"),
                    "status": current.get("status"),
                    "reason": current.get("reason") or "",
                    "outcome": _outcome(node["latency_ms"], error),
                    "latency_ms": node["latency_ms"],
                    "error": error,
                }
            )
    return {
        "at": time.time(),
        "ok": all(check["outcome"] != "fail" for check in checks),
        "nodes": nodes,
        "checks": checks,
        "summary": summarize(checks),
    }


def summarize(checks: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts of a list of checks (``diagnostics()["checks"]``), as Monarch's
    ``monarch-tui --diagnose`` reports them.

    Args:
        checks: the checks.
    """

    def passed(phase: str | None) -> tuple[int, int]:
        mine = [c for c in checks if phase is None or c["phase"] == phase]
        return sum(c["outcome"] != "fail" for c in mine), len(mine)

    ok, total = passed(None)
    admin_ok, admin_total = passed("admin_infra")
    mesh_ok, mesh_total = passed("mesh")
    return {
        "total": total,
        "passed": ok,
        "slow": sum(c["outcome"] == "slow" for c in checks),
        "failed": total - ok,
        "admin_infra_passed": admin_ok,
        "admin_infra_total": admin_total,
        "mesh_passed": mesh_ok,
        "mesh_total": mesh_total,
        "failed_actors": sum(c.get("status") == "failed" for c in checks),
        "healthy": ok == total,
    }


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
