"""tools/bench/rdma_trace.py: a transfer's stages, from both processes' clocks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_stages_of_a_tcp_read_add_up_to_the_whole() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools/bench/rdma_trace.py"), "--backend", "tcp",
         "--samples", "60"],
        capture_output=True, text=True, timeout=180, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["matched"] >= 50  # nearly every transfer matched to its request on the owner
    stages = ["before request", "to the owner", "owner", "answer back", "after answer"]
    assert all(result[stage] > 0 for stage in stages)  # the two clocks agree on order
    # medians do not add exactly; far apart, the stages would be of other transfers
    assert 0.5 * result["total_us"] <= sum(result[s] for s in stages) <= 1.5 * result["total_us"]
    assert "to the owner" in done.stdout and "whole" in done.stdout


def test_cuda_ipc_says_why_it_cannot_run_without_a_gpu() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools/bench/rdma_trace.py"), "--backend", "cuda_ipc"],
        capture_output=True, text=True, timeout=180, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        assert result["matched"] > 0
    else:
        assert "skipped" in result
