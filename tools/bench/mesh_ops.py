"""Mesh algebra on a 1,000,000-rank mesh: the workload, runnable against
this project (``--impl ours``) or torchmonarch 0.7.0 (``--impl monarch``, in
its own virtual environment). Prints one JSON object: operation -> best
seconds over ``--repeat`` runs. Operations one implementation lacks are
left out of its result."""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable

HOSTS, GPUS = 125_000, 8  # 1,000,000 ranks


def load(impl: str) -> dict[str, object]:
    if impl == "ours":
        import monarch_mesh as m

        return {"Shape": m.Shape, "Slice": m.Slice, "RoutingTree": m.RoutingTree}
    from monarch._rust_bindings.monarch_hyperactor.shape import Shape, Slice

    return {"Shape": Shape, "Slice": Slice, "RoutingTree": None}


def workload(api: dict[str, object]) -> dict[str, Callable[[], object]]:
    Shape, Slice, RoutingTree = api["Shape"], api["Slice"], api["RoutingTree"]
    mesh = Shape(["hosts", "gpus"], Slice.new_row_major([HOSTS, GPUS]))
    rng = random.Random(0)
    ranks = [rng.randrange(HOSTS * GPUS) for _ in range(1000)]
    positions = [rng.randrange(HOSTS * GPUS) for _ in range(1000)]
    sparse = list(range(0, HOSTS * GPUS, 3))
    ops: dict[str, Callable[[], object]] = {
        "build a 1M-rank shape, 1000 times": lambda: [
            Shape(["hosts", "gpus"], Slice.new_row_major([HOSTS, GPUS])) for _ in range(1000)
        ],
        "slice it (hosts 1000::7, then gpus=2), 1000 times": lambda: [
            mesh.select("hosts", slice(1000, None, 7)).at("gpus", 2) for _ in range(1000)
        ],
        "rank -> coordinates, 1000 ranks": lambda: [mesh.coordinates(r) for r in ranks],
        "rank -> position, 1000 ranks": lambda: [mesh.ndslice.index(r) for r in ranks],
        "position -> rank, 1000 positions": lambda: [mesh.ndslice[p] for p in positions],
        "enumerate all 1M ranks": lambda: mesh.ranks(),
        "Slice.from_list of 333,334 ranks": lambda: Slice.from_list(sparse),
    }
    if RoutingTree is not None:

        def route() -> object:
            tree = RoutingTree(mesh, 16)
            return [(tree.children(r), tree.parent(r)) for r in ranks]

        ops["routing tree: build, children and parent of 1000 ranks"] = route
        ops["routing tree: walk every edge (1M)"] = lambda: sum(
            1 for _ in RoutingTree(mesh, 16).edges()
        )
    return ops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--impl", choices=["ours", "monarch"], required=True)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    results = {}
    for name, op in workload(load(args.impl)).items():
        best = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            op()
            best = min(best, time.perf_counter() - start)
        results[name] = best
    print(json.dumps(results))


if __name__ == "__main__":
    main()
