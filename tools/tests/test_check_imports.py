"""tools/check-imports: no package touches another package's private attributes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "tools" / "check-imports"


def run_check(packages: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECK), "--attributes", str(packages)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def test_no_package_of_the_workspace_reaches_into_another() -> None:
    result = run_check(ROOT / "packages")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_private_attribute_of_a_sibling_fails_and_the_others_pass(tmp_path: Path) -> None:
    write(
        tmp_path / "alpha" / "src" / "alpha" / "__init__.py",
        """
        class Mesh:
            def __init__(self) -> None:
                self._table = {}
                self._shape = (2,)

            @classmethod
            def _make(cls) -> "Mesh":
                return cls()
        """,
    )
    write(
        tmp_path / "beta" / "src" / "beta" / "__init__.py",
        """
        import sys

        from alpha import Mesh


        class Device:
            def __init__(self, mesh: Mesh) -> None:
                self._shape = mesh._shape  # beta defines _shape too: unknown type, passes
                self._mesh = mesh
                self._frame = sys._getframe(0)  # another distribution's private: passes
                self._done = super().__init__  # passes

            def other(self, device: "Device") -> object:
                return device._mesh  # beta's own private on another object: passes

            def table(self) -> object:
                return self._mesh._table  # alpha's private: fails

        made = Mesh._make()  # on a name imported from alpha: fails
        shape = Mesh._shape  # on a name imported from alpha, though beta defines _shape: fails
        """,
    )
    result = run_check(tmp_path)
    assert result.returncode == 1
    # each problem: "check-imports: <packages dir>/<package>/src/...:<line>: ..."
    found = [line.split(": ", 2)[1].split("/", 1)[1] for line in result.stdout.splitlines()]
    assert found == [
        "beta/src/beta/__init__.py:18",
        "beta/src/beta/__init__.py:20",
        "beta/src/beta/__init__.py:21",
    ], result.stdout
    assert "self._mesh._table reaches a private attribute of alpha" in result.stdout
