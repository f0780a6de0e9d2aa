"""The project's demo: a tour of what runs today on this host.

Run it with ``pip install hatch && hatch run demo`` from the repository root.
Today: actors on this host, then the mesh algebra under them; the tour grows
with each capability.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from rich.console import Console
from rich.table import Table
from rich.tree import Tree

from monarch.actor import Actor, ActorError, context, endpoint, this_host
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
    def report(self) -> tuple[int, int, str]:
        rank = context().actor_instance.rank
        return os.getpid(), self.count, os.environ["RANK"] + f"/{rank}"

    @endpoint
    def ping(self) -> None:
        return None

    @endpoint
    def divide(self, a: float, b: float) -> float:
        return a / b


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
    workers.bump.broadcast()
    workers.slice(gpus=slice(0, None, 2)).bump.broadcast()
    table = Table(title="workers.report.call().get()", title_justify="left")
    for column in ("point", "pid", "count", "RANK/rank"):
        table.add_column(column)
    for point, (pid, count, rank) in workers.report.call().get():
        table.add_row(str(point), str(pid), str(count), rank)
    console.print(table)
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


def tour_selection(mesh: Shape) -> None:
    console.rule("[bold]3. Selections")
    for text in ["(*, 0)", "(0, *) | (*, 7)", "((0, *) | (*, 0)) & (0:2, 0:4)", "(?, *)"]:
        picked = Selection.from_string(text).eval(mesh)
        console.print(grid(mesh, picked, f"Selection.from_string({text!r})"))
    try:
        Selection.from_string("(0, 1 2)")
    except ValueError as error:
        console.print("[dim]a typo is reported where it is:[/]")
        console.print(f"[red]{error}[/]\n")


def tour_routing(mesh: Shape, fanout: int) -> None:
    console.rule(f"[bold]4. The multicast tree of a broadcast (fan-out {fanout})")
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
    console.print(f"[green]all of the above took {elapsed:.2f} ms[/]")


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
    tour_actors(args.procs)
    tour_slicing(mesh)
    tour_selection(mesh)
    tour_routing(mesh, args.fanout)
    tour_scale()


if __name__ == "__main__":
    main()
