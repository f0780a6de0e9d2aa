"""The API reference documents everything it shows (tools/check-api-docs)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "tools" / "check-api-docs"


def run_check(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECK), *map(str, args)], capture_output=True, text=True, timeout=120
    )


def test_every_public_member_of_the_reference_has_a_docstring_with_its_arguments() -> None:
    result = run_check()
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_check_names_what_is_missing(tmp_path: Path) -> None:
    package = tmp_path / "src" / "toy"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        textwrap.dedent(
            '''
            """A toy package."""

            __all__ = ["Box", "documented", "hidden", "undocumented"]


            def documented(size: int) -> int:
                """Double a size.

                Args:
                    size: how big.
                """
                return 2 * size


            def undocumented(size: int) -> int:
                return size


            def hidden() -> None:
                """On no page."""


            class Box:
                """A box.

                Args:
                    width: how wide.
                """

                def __init__(self, width: int, height: int) -> None:
                    self._width = width

                def grow(self, by: int) -> None:
                    """Grow, without saying by how much."""

                def shrink(self) -> None:
                    """Shrink, as :meth:`grow` does not.

                    >>> Box(1, 2).shrink()
                    """
            '''
        )
    )
    pages = tmp_path / "docs"
    pages.mkdir()
    (pages / "toy.md").write_text(
        "# toy\n\n::: toy.documented\n\n::: toy.undocumented\n\n::: toy.Box\n"
    )
    result = run_check("--docs", pages, "--src", tmp_path / "src")
    assert result.returncode == 1
    found = result.stdout
    assert "toy.undocumented: no docstring" in found
    assert "toy.Box: parameter 'height' not under Args:" in found
    assert "toy.Box.grow: parameter 'by' not under Args:" in found
    assert "toy.hidden: on no page" in found
    assert "toy.Box.shrink: a Sphinx role" in found
    assert "toy.Box.shrink: a >>> example outside an Examples: section" in found
    assert "toy.documented" not in found
    assert "width" not in found
