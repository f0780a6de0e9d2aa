"""Run the benchmarks side by side with Monarch (torchmonarch) and write the
ratios into docs/benchmarks.md.

    hatch run bench mesh            # measure, print the table
    hatch run bench mesh --write    # ... and update docs/benchmarks.md

torchmonarch is installed into a virtual environment of its own (its module
name clashes with ours), created on first use under .bench-venvs/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import venv
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[2]
BENCH = Path(__file__).resolve().parent
VENVS = ROOT / ".bench-venvs"
MONARCH = ("torch==2.13.0", "torchmonarch==0.7.0")
console = Console(stderr=True)


def monarch_python(explicit: str | None) -> Path:
    """A Python with torchmonarch 0.7.0, made on first use."""
    if explicit:
        return Path(explicit)
    python = VENVS / "torchmonarch" / "bin" / "python"
    if not python.exists():
        console.print(f"[bold]creating {python.parent.parent}[/] with {', '.join(MONARCH)} ...")
        venv.create(python.parent.parent, with_pip=True)
        subprocess.run([python, "-m", "pip", "install", "--quiet", *MONARCH], check=True)
    return python


def measure(python: Path | str, script: str, impl: str, repeat: int) -> dict[str, float]:
    console.print(f"measuring [bold]{impl}[/] with {python} ...")
    out = subprocess.run(
        [str(python), str(BENCH / script), "--impl", impl, "--repeat", str(repeat)],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": ""},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def duration(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def mesh(args: argparse.Namespace) -> str:
    ours = measure(sys.executable, "mesh_ops.py", "ours", args.repeat)
    theirs = measure(monarch_python(args.monarch_python), "mesh_ops.py", "monarch", args.repeat)
    table = Table(title="mesh algebra on a 1,000,000-rank mesh {hosts: 125000, gpus: 8}")
    rows = ["| operation | ours | Monarch 0.7.0 | ours / Monarch (time) |", "|---|---|---|---|"]
    for column in ("operation", "ours", "Monarch 0.7.0", "ours / Monarch"):
        table.add_column(column, justify="left" if column == "operation" else "right")
    for name, ours_s in ours.items():
        theirs_s = theirs.get(name)
        ratio = f"{ours_s / theirs_s:.1f}×" if theirs_s else "—"
        cells = (name, duration(ours_s), duration(theirs_s) if theirs_s else "n/a", ratio)
        table.add_row(*cells)
        rows.append("| " + " | ".join(cells) + " |")
    Console().print(table)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    return "\n".join([f"Measured on {machine}; best of {args.repeat} runs.", "", *rows])


def transport(args: argparse.Namespace) -> str:
    console.print("measuring transports against raw pynng and raw sockets ...")
    out = subprocess.run(
        [sys.executable, str(BENCH / "transport_bench.py")],
        check=True,
        capture_output=True,
        text=True,
    )
    results = json.loads(out.stdout.strip().splitlines()[-1])
    table = Table(title="transport: ours against the raw floor, echo server in a second process")
    header = (
        "backend / family",
        "round trip",
        "floor",
        "× floor",
        "one-way msgs/s",
        "floor",
        "64 MiB echo GB/s",
        "floor",
        "× floor (time)",
    )
    for column in header:
        table.add_column(column, justify="left" if column == header[0] else "right")
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for family in ("ipc", "tcp"):
        for backend, floor in (("nng", "raw-pynng"), ("socket", "raw-socket")):
            ours, raw = results[f"{backend}/{family}"], results[f"{floor}/{family}"]
            cells = (
                f"{backend} / {family}",
                f"{ours['rt_us']:.0f} µs",
                f"{raw['rt_us']:.0f} µs",
                f"{ours['rt_us'] / raw['rt_us']:.2f}×",
                f"{ours['msgs_per_s']:,.0f}",
                f"{raw['msgs_per_s']:,.0f}",
                f"{ours['big_gbps']:.2f}",
                f"{raw['big_gbps']:.2f}",
                f"{raw['big_gbps'] / ours['big_gbps']:.2f}×",
            )
            table.add_row(*cells)
            rows.append("| " + " | ".join(cells) + " |")
    Console().print(table)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    return "\n".join([f"Measured on {machine}.", "", *rows])


SUITES = {"mesh": mesh, "transport": transport}


def write_section(name: str, body: str) -> None:
    """Replace the section between this suite's markers in docs/benchmarks.md."""
    page = ROOT / "docs" / "benchmarks.md"
    text = page.read_text()
    begin, end = f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"
    block = f"{begin}\n{body}\n{end}"
    if begin in text:
        text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    page.write_text(text)
    console.print(f"updated {page.relative_to(ROOT)}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("suite", choices=sorted(SUITES), help="which benchmark to run")
    parser.add_argument("--repeat", type=int, default=5, help="runs per operation; the best counts")
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    parser.add_argument("--monarch-python", help="a Python that has torchmonarch 0.7.0 installed")
    args = parser.parse_args()
    body = SUITES[args.suite](args)
    if args.write:
        write_section(args.suite, body)


if __name__ == "__main__":
    main()
