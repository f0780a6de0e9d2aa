"""The project's demo: a tour of what runs today on this host.

Run it with ``pip install hatch && hatch run demo:tour`` from the repository
root. Its environment (``[tool.hatch.envs.demo]``) holds only what the tour
imports: the actor runtime and the mesh algebra, no torch, no test tools, so
the first run is quick. It shows actors on this host, then the mesh algebra
under them, and ends with where to go next.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from rich.console import Console
from rich.table import Table
from rich.tree import Tree

# monarch_actor is what `monarch.actor` re-exports; importing it directly keeps the
# demo's environment free of torch (the `monarch` meta-package brings monarch-tensor)
from monarch_actor import Actor, ActorError, current_rank, endpoint, this_host
from monarch_mesh import RoutingTree, Selection, Shape, Slice

console = Console()


def grid(shape: Shape, picked: list[int], title: str) -> Table:
    """A hosts x gpus picture of ``shape``: picked ranks by number, others as dots."""
    hosts, gpus = shape.extent["hosts"], shape.extent["gpus"]
    chosen = set(picked)
    table = Table(title=title, show_header=True, header_style="dim", title_justify="left")
    table.add_column("")
    for g in range(gpus):
        table.add_column(f"gpu {g}", justify="center")
    for h in range(hosts):
        cells = []
        for g in range(gpus):
            rank = shape.location(hosts=h, gpus=g)
            cells.append(f"[bold green]{rank}[/]" if rank in chosen else "[dim]·[/]")
        table.add_row(f"host {h}", *cells)
    return table


class Worker(Actor):
    """One per process: counts, reports where it runs, and fails on demand."""

    def __init__(self) -> None:
        self.count = 0

    @endpoint
    def bump(self) -> None:
        self.count += 1

    @endpoint
    def report(self) -> tuple[int, int, int]:
        return os.getpid(), self.count, current_rank().rank

    @endpoint
    def ping(self) -> None:
        return None

    @endpoint
    def divide(self, a: float, b: float) -> float:
        return a / b


def intro(procs: int) -> None:
    console.print(
        "[bold]Monarch in Python: a tour[/]\n"
        "One script, the [italic]controller[/], starts processes, puts an actor in each,\n"
        f"and sends them messages. Part 1 does that for real, with {procs} processes on this\n"
        "machine. Parts 2 to 5 show the mesh algebra that names, slices and routes to\n"
        "those processes; they compute on an imagined cluster and start nothing.\n"
    )


def tour_actors(procs_per_host: int) -> None:
    console.rule("[bold]1. Actors on this host")
    start = time.perf_counter()
    procs = this_host().spawn_procs(per_host={"gpus": procs_per_host})
    workers = procs.spawn("workers", Worker)
    workers.ping.call().get()
    console.print(
        f"spawned {procs_per_host} processes and a Worker in each: "
        f"{(time.perf_counter() - start) * 1e3:.0f} ms"
    )
    console.print("[dim]each Worker counts the bump messages it gets. Two broadcasts:[/]")
    workers.bump.broadcast()
    console.print("  workers.bump.broadcast()                              [dim]# every worker[/]")
    workers.slice(gpus=slice(0, None, 2)).bump.broadcast()
    console.print("  workers.slice(gpus=slice(0, None, 2)).bump.broadcast()  [dim]# even gpus[/]")
    table = Table(title="workers.report.call().get(): one answer per worker", title_justify="left")
    for column in ("point", "rank", "pid", "count"):
        table.add_column(column)
    for point, (pid, count, rank) in workers.report.call().get():
        where = ", ".join(f"{dim}={i}" for dim, i in point.items())
        table.add_row(where, str(rank), str(pid), str(count))
    console.print(table)
    console.print("[dim]count is 2 on the even gpus (both broadcasts), 1 elsewhere.[/]")
    one = workers.slice(gpus=1)
    times = []
    for _ in range(200):
        t0 = time.perf_counter()
        one.ping.call_one().get()
        times.append(time.perf_counter() - t0)
    console.print(f"call_one round trip, median of 200: {statistics.median(times) * 1e6:.0f} µs")
    try:
        one.divide.call_one(1, 0).get()
    except ActorError as error:
        console.print(
            f"[dim]a remote error comes back to the caller:[/] [red]{error.exception!r}[/]"
        )
    console.print(f"and the actor lives on: 1 / 4 = {one.divide.call_one(1, 4).get()}")
    procs.stop().get()
    console.print("[green]stopped: every process reaped[/]\n")


def tour_slicing(mesh: Shape) -> None:
    console.rule("[bold]2. A mesh and its slices")
    console.print(
        "[dim]an imagined cluster: hosts x gpus, one rank per process. Slicing by name\n"
        "picks processes the way workers.slice(...) did in part 1.[/]"
    )
    console.print(f"mesh = Shape({mesh.labels}, Slice.new_row_major({mesh.ndslice.sizes}))")
    console.print(f"extent: {mesh.extent}    ranks: {len(mesh)}\n")
    examples = [
        ("mesh.index(hosts=1)", mesh.index(hosts=1)),
        ("mesh.index(gpus=slice(None, None, 2))", mesh.index(gpus=slice(None, None, 2))),
        (
            "mesh.index(hosts=slice(1, 3), gpus=slice(-2, None))",
            mesh.index(hosts=slice(1, 3), gpus=slice(-2, None)),
        ),
    ]
    for code, sliced in examples:
        console.print(grid(mesh, sliced.ranks(), f"{code}  ->  {sliced}"))
    split = mesh.split(gpus=("pairs", "lane"), lane=2)
    console.print(f"mesh.split(gpus=('pairs', 'lane'), lane=2)  ->  {split}")
    console.print(f"mesh.flatten('rank')                         ->  {mesh.flatten('rank')}\n")


SELECTIONS = [
    ("(*, 0)", "gpu 0 of every host"),
    ("(0, *) | (*, 7)", "all of host 0, or gpu 7 of any host"),
    ("((0, *) | (*, 0)) & (0:2, 0:4)", "the same idea, cut to hosts 0-1 and gpus 0-3"),
    ("(?, *)", "one host picked at random, all its gpus: run the tour again for another"),
]


def tour_selection(mesh: Shape) -> None:
    console.rule("[bold]3. Selections")
    console.print("[dim]a selection is a pattern over the mesh, one term per dimension.[/]")
    for text, meaning in SELECTIONS:
        picked = Selection.from_string(text).eval(mesh)
        console.print(grid(mesh, picked, f"Selection.from_string({text!r}): {meaning}"))
    try:
        Selection.from_string("(0, 1 2)")
    except ValueError as error:
        console.print("[dim]a typo is reported where it is:[/]")
        console.print(f"[red]{error}[/]\n")


def tour_routing(mesh: Shape, fanout: int) -> None:
    console.rule(f"[bold]4. The multicast tree of a broadcast (fan-out {fanout})")
    console.print(
        "[dim]a broadcast is not sent to every rank by the controller: each rank forwards\n"
        f"it to at most {fanout} others, down this tree.[/]"
    )
    tree = RoutingTree(mesh, fanout)
    root = Tree(f"[bold]controller[/] -> rank {tree.root}")
    nodes = {tree.root: root}
    for parent, child in tree.edges():
        point = mesh.coordinates(child)
        nodes[child] = nodes[parent].add(f"rank {child} [dim]{point}[/]")
    console.print(root)
    console.print(f"depth {tree.depth} for {len(tree)} ranks\n")


def tour_scale() -> None:
    console.rule("[bold]5. At scale: a million ranks, never enumerated")
    console.print("[dim]the same algebra on 125,000 hosts x 8 gpus, computed, not listed.[/]")
    big = Shape(["hosts", "gpus"], Slice.new_row_major([125_000, 8]))
    start = time.perf_counter()
    sliced = big.index(hosts=slice(1000, None, 7), gpus=slice(0, 8, 2))
    rank = sliced.ndslice[len(sliced) // 2]
    coords = big.coordinates(rank)
    tree = RoutingTree(big, fanout=16)
    path = [999_999]
    while (parent := tree.parent(path[-1])) is not None:
        path.append(parent)
    elapsed = (time.perf_counter() - start) * 1e3
    console.print(f"mesh {big} -> slice {sliced} with {len(sliced):,} ranks")
    console.print(f"middle rank of the slice: {rank:,} at {coords}")
    console.print(
        f"route to rank 999,999: {' <- '.join(f'{r:,}' for r in path)} (depth {tree.depth})"
    )
    console.print(f"[green]all of the above took {elapsed:.2f} ms[/]\n")


def where_next() -> None:
    console.rule("[bold]Where to go next")
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    for what, where in [
        ("learn, step by step", "docs/tutorials/getting-started.md"),
        ("run these docs' code", "hatch shell, then python; or see docs/install.md"),
        ("a torchrun script on a mesh", "docs/how-to/spmd.md"),
        ("Slurm, Kubernetes", "docs/how-to/slurm.md, docs/how-to/kubernetes.md"),
        ("coming from Meta's Monarch", "docs/how-to/migrate-from-monarch.md"),
        ("the whole site", "pip install hatch && hatch run docs:serve"),
    ]:
        table.add_row(what, where)
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=4, help="hosts in the demo mesh (default 4)")
    parser.add_argument("--gpus", type=int, default=8, help="gpus per host (default 8)")
    parser.add_argument("--fanout", type=int, default=4, help="multicast fan-out (default 4)")
    parser.add_argument(
        "--procs", type=int, default=4, help="processes to spawn on this host (default 4)"
    )
    args = parser.parse_args()
    if args.hosts < 2 or args.gpus < 8:
        parser.error("the tour needs at least 2 hosts and 8 gpus per host")
    if not 2 <= args.procs <= 64:
        parser.error("--procs must be between 2 and 64")
    mesh = Shape(["hosts", "gpus"], Slice.new_row_major([args.hosts, args.gpus]))
    intro(args.procs)
    tour_actors(args.procs)
    tour_slicing(mesh)
    tour_selection(mesh)
    tour_routing(mesh, args.fanout)
    tour_scale()
    where_next()


if __name__ == "__main__":
    main()
