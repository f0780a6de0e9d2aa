"""A stand-in for Slurm's commands on one machine, for SlurmJob's tests
where no Slurm is installed: ``sbatch`` really runs the batch script (with
bash, detached), ``srun`` really starts one task per node, ``squeue``,
``scontrol show hostnames`` and ``scancel`` report and end it. The nodes'
addresses (NodeAddr) are loopback addresses (127.0.0.1, 127.0.0.2, ...), so
each node's worker can listen on the same port, as on a real cluster, or
one address for several nodes, as in a one-machine cluster.

State lives in ``$FAKE_SLURM_DIR``; ``$FAKE_SLURM_NODES`` lists the nodes,
``$FAKE_SLURM_ADDRS`` their addresses (default: their names);
``$FAKE_SLURM_PENDING`` is how many ``squeue`` calls see the job PENDING
first; ``$FAKE_SLURM_STATE`` forces the state ``squeue`` reports."""

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

STATE = Path(os.environ.get("FAKE_SLURM_DIR", "/tmp/fakeslurm"))


def nodes() -> list[str]:
    return os.environ.get("FAKE_SLURM_NODES", "127.0.0.1").split(",")


def addresses() -> dict[str, str]:
    given = os.environ.get("FAKE_SLURM_ADDRS")
    return dict(zip(nodes(), given.split(",") if given else nodes(), strict=True))


def load(job: str) -> dict:
    return json.loads((STATE / f"{job}.json").read_text())


def save(job: str, data: dict) -> None:
    (STATE / f"{job}.json").write_text(json.dumps(data))


def option(lines: list[str], name: str) -> str | None:
    for line in lines:
        if line.startswith(f"#SBATCH --{name}="):
            return line.split("=", 1)[1]
    return None


def sbatch(args: list[str]) -> int:
    STATE.mkdir(parents=True, exist_ok=True)
    script = sys.stdin.read()
    (STATE / "last-script.sh").write_text(script)
    lines = script.splitlines()
    wanted = int(option(lines, "nodes") or 1)
    if wanted > len(nodes()):
        sys.stderr.write(
            "sbatch: error: Batch job submission failed: Requested node configuration is not "
            "available\n"
        )
        return 1
    job = str(len(list(STATE.glob("*.json"))) + 100)
    given = nodes()[:wanted]
    out = (option(lines, "output") or f"slurm-{job}.out").replace("%j", job)
    err = (option(lines, "error") or out).replace("%j", job)
    env = {**os.environ, "SLURM_JOB_ID": job, "SLURM_JOB_NODELIST": ",".join(given)}
    path = STATE / f"{job}.sh"
    path.write_text(script)
    with open(out, "ab") as stdout, open(err, "ab") as stderr:
        batch = subprocess.Popen(
            ["sh", "-c", f'bash "{path}"; echo $? > "{STATE}/{job}.exit"'],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
    save(
        job,
        {
            "nodes": given,
            "pid": batch.pid,
            "cancelled": False,
            "pending": int(os.environ.get("FAKE_SLURM_PENDING", "0")),
            "forced": os.environ.get("FAKE_SLURM_STATE"),
        },
    )
    print(job if "--parsable" in args else f"Submitted batch job {job}")
    return 0


def squeue(args: list[str]) -> int:
    job = args[args.index("-j") + 1]
    try:
        data = load(job)
    except FileNotFoundError:
        data = None
    if data is not None and data["forced"]:
        print(f"{data['forced']}||NonZeroExitCode")
        return 0
    if data is None or data["cancelled"] or (STATE / f"{job}.exit").exists():
        sys.stderr.write("slurm_load_jobs error: Invalid job id specified\n")
        return 1
    if data["pending"] > 0:
        data["pending"] -= 1
        save(job, data)
        print("PENDING||Resources")
    else:
        print(f"RUNNING|{','.join(data['nodes'])}|None")
    return 0


def scontrol(args: list[str]) -> int:
    if args[:2] == ["show", "hostnames"]:
        for node in args[2].split(","):
            print(node)
        return 0
    if args[:3] == ["show", "node", "-o"]:
        known = addresses()
        for node in args[3].split(","):
            print(
                f"NodeName={node} Arch=x86_64 CoresPerSocket=1 NodeAddr={known[node]} "
                f"NodeHostName={node} State=ALLOCATED"
            )
        return 0
    sys.stderr.write(f"fake scontrol: not supported: {args}\n")
    return 1


def scancel(args: list[str]) -> int:
    job = args[0]
    data = load(job)
    data["cancelled"] = True
    save(job, data)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(data["pid"], signal.SIGTERM)
    return 0


def srun(args: list[str]) -> int:
    if "--help" in args:
        print("Usage: srun [OPTIONS(0)... [executable(0) [args(0)...]]]\n  --whole ...")
        return 0
    i = 0
    count = None
    while i < len(args) and args[i].startswith("-"):
        if args[i].startswith("--ntasks="):
            count = int(args[i].split("=", 1)[1])
        i += 1
    command = args[i:]
    hosts = os.environ["SLURM_JOB_NODELIST"].split(",")
    tasks = [
        subprocess.Popen(command, env={**os.environ, "SLURMD_NODENAME": host})
        for host in hosts[: count or len(hosts)]
    ]

    def stop(signum, frame):
        for task in tasks:
            if task.poll() is None:
                task.terminate()

    signal.signal(signal.SIGTERM, stop)
    codes = [task.wait() for task in tasks]
    return max(codes, key=abs)


if __name__ == "__main__":
    command, rest = sys.argv[1], sys.argv[2:]
    sys.exit(
        {
            "sbatch": sbatch,
            "squeue": squeue,
            "scontrol": scontrol,
            "scancel": scancel,
            "srun": srun,
        }[command](rest)
    )
