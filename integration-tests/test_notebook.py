"""The docs' notebook runs in a real Jupyter kernel, cell by cell, as a user
runs it: actors defined in cells work in the procs, a failing endpoint shows
its error in the cell (and the kernel goes on), and what the procs print
reaches the notebook, and an actor stopped at ``breakpoint()`` is attached,
shows the cell's source and goes on (``test_notebook_debugger.py`` attaches
with ``monarch debug`` from a terminal)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "docs" / "how-to" / "notebook.ipynb"


def text(cell) -> str:
    """Everything a cell showed: streams, results and errors."""
    parts = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            parts.append(out["text"])
        elif out["output_type"] in ("execute_result", "display_data"):
            parts.append(out["data"].get("text/plain", ""))
        elif out["output_type"] == "error":
            parts.append(f"{out['ename']}: {out['evalue']}\n" + "\n".join(out["traceback"]))
    return "".join(parts)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path_factory.mktemp("notebook"))}},
    )
    # as Jupyter starts it: ipykernel shows what is written to the kernel's own
    # stdout (the fd the procs inherit) only outside pytest, which it spots by this
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    env["MONARCH_DEBUG_SERVER_PORT"] = "0"  # any free port, not 27000: CI runs side by side
    env["MONARCH_STATE_DIR"] = str(tmp_path_factory.mktemp("state"))
    client.execute(env=env)
    return {cell["id"]: cell for cell in nb.cells}


def test_the_notebook_is_stored_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert all(not c.get("outputs") for c in nb.cells if c["cell_type"] == "code")


def test_actors_defined_in_cells_run_in_the_procs(executed):
    assert "doubled: [22, 22]" in text(executed["spawn"])
    later = text(executed["later"])
    assert "hello notebook from rank 0" in later and "hello notebook from rank 1" in later


def test_a_failing_endpoint_shows_its_error_and_the_kernel_goes_on(executed):
    failure = executed["failure"]
    errors = [o for o in failure["outputs"] if o["output_type"] == "error"]
    assert errors, text(failure)
    assert errors[0]["ename"] == "ActorError"
    assert "ZeroDivisionError" in text(failure)  # the remote exception, with its traceback
    alive = text(executed["alive"])
    assert "caught: ZeroDivisionError" in alive
    assert "still counting: 5.5" in alive


def shown_from(executed, cell_id: str) -> str:
    """What a cell showed, and the next code cell: a proc's line that arrives
    just after its cell finished is shown under the next one, as in Jupyter."""
    ids = [i for i, c in executed.items() if c["cell_type"] == "code"]
    at = ids.index(cell_id)
    return "".join(text(executed[i]) for i in ids[at : at + 2])


def test_what_procs_print_reaches_the_notebook(executed):
    shown = shown_from(executed, "output")
    assert "rank 0 says hello" in shown and "rank 1 says hello" in shown, shown


def test_streamed_output_is_tagged_with_the_rank(executed):
    shown = shown_from(executed, "streamed")
    assert "[0] rank 0 says again" in shown and "[1] rank 1 says again" in shown, shown


def test_get_in_a_cell_does_not_warn(executed):
    """A cell's plain code runs inside the kernel's event loop; `.get()` there
    is what the cell means, not async code that should await."""
    for cell in executed.values():
        for out in cell.get("outputs", []):
            if out["output_type"] == "stream":
                assert "Future.get() was called from within" not in out["text"], out["text"]


def test_a_breakpoint_in_a_cells_actor_is_attached_and_goes_on(executed):
    shown = text(executed["debug-client"])
    assert "Attached to debug session for steppers 0" in shown, shown
    assert "loss is 1.0" in shown
    # pdb lists the lines of the cell that defined the actor, kept by the kernel
    assert "breakpoint()  # this actor waits here for the debugger" in shown, shown
    assert "[steppers 0] continued" in shown
    assert "returned 0.5" in shown


def test_stopping_ends_the_procs(executed):
    assert "stopped" in text(executed["stop"])
