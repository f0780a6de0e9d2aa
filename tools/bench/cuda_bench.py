"""CUDA tensors through actor endpoints (ours only): a 64 MiB tensor echoed by
an actor in another process of this host, ``call_one(t).get()``, median round
trip, reported as 64 MiB / round trip (bytes per second):

- ``cuda_ipc_64m``: a CUDA tensor, by CUDA IPC (the default on a one-GPU host);
- ``cuda_staged_64m``: the same with ``cuda_ipc`` off, staged through pinned
  host memory both ways (what crosses hosts);
- ``cpu_64m``: a CPU tensor of the same size, for comparison.

Each case spawns its own process (under ``monarch_config.configured(cuda_ipc=...)``,
which the process inherits), checks one echo for equality, then times
``--samples`` echoes after 2 warm-ups. Prints one JSON object with those keys
(plus ``device``); where torch or CUDA is missing it prints a line saying why
to stderr and ``{"skipped": why}``, and exits 0.

    python tools/bench/cuda_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from _timing import cuda_skip_reason, log, median_time

SIZE = 64 << 20


def workload(args: argparse.Namespace) -> dict[str, Any]:
    reason = cuda_skip_reason()
    if reason is not None:
        return skipped(reason)
    import torch

    from monarch.actor import Actor, endpoint, this_host
    from monarch_config import configured

    class Echo(Actor):
        @endpoint
        def echo(self, tensor: Any) -> Any:
            return tensor

    results: dict[str, Any] = {"device": torch.cuda.get_device_name()}
    samples = 5 if args.quick else args.samples
    for key, device, ipc in (
        ("cuda_ipc_64m", "cuda", True),
        ("cuda_staged_64m", "cuda", False),
        ("cpu_64m", "cpu", True),
    ):
        with configured(cuda_ipc=ipc):
            procs = this_host().spawn_procs(per_host={"procs": 1})
            try:
                one = procs.spawn("echo", Echo)
                data = torch.randint(0, 256, (SIZE,), dtype=torch.uint8, device=device)
                back = one.echo.call_one(data).get(timeout=120)
                assert back.device.type == device and torch.equal(back, data), key

                def echo(data: Any = data, one: Any = one) -> None:
                    back = one.echo.call_one(data).get(timeout=120)
                    if back.is_cuda:
                        torch.cuda.synchronize()  # the received copy is complete

                results[key] = SIZE / median_time(echo, samples, 2)
                log(f"{key} {results[key] / 1e9:.2f} GB/s (64 MiB / round trip)")
            finally:
                procs.stop().get(timeout=60)
    return results


def skipped(why: str) -> dict[str, Any]:
    log(f"cuda_bench skipped: {why}")
    return {"skipped": why}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--samples", type=int, default=20, help="timed echoes per case")
    args = parser.parse_args()
    print(json.dumps(workload(args)), flush=True)


if __name__ == "__main__":
    main()
