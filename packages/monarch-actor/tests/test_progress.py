"""Progress lines where a person waits: shown on a terminal (or when forced),
never in logs or pipes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from monarch_actor.extension import progress

SCRIPT = textwrap.dedent(
    """
    from monarch_actor import this_host
    procs = this_host().spawn_procs(per_host={"gpus": 16})
    procs.initialized.get(timeout=120)
    procs.stop().get(timeout=120)
    print("done")
    """
)


def run(mode: str | None) -> subprocess.CompletedProcess[str]:
    env = {"MONARCH_PRELOAD": "none"}
    if mode is not None:
        env["MONARCH_PROGRESS"] = mode
    return subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_a_large_mesh_shows_its_start_when_asked() -> None:
    shown = run("always")
    assert shown.returncode == 0, shown.stderr
    assert "starting proc mesh 'anon'" in shown.stderr
    quiet = run(None)  # auto, and standard error is a pipe here
    assert quiet.returncode == 0, quiet.stderr
    assert "starting proc mesh" not in quiet.stderr
    assert quiet.stdout == shown.stdout == "done\n"


def test_a_line_is_silent_unless_shown(monkeypatch: pytest.MonkeyPatch, capfd) -> None:
    monkeypatch.setenv("MONARCH_PROGRESS", "never")
    with progress("counting sheep", total=3) as line:
        line.update(completed=2)
    assert capfd.readouterr().err == ""
    monkeypatch.setenv("MONARCH_PROGRESS", "always")
    with progress("counting sheep", total=3) as line:
        line.update(completed=3, description="counted sheep")
    assert "sheep" in capfd.readouterr().err
