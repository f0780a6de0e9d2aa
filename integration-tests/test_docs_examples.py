"""Every code example in the docs and READMEs runs, as written.

``pycon`` blocks are doctests: their output must match. The ``python`` blocks
of a page run together, in order, as one script in a fresh interpreter.
"""

from __future__ import annotations

import doctest
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([*ROOT.glob("docs/**/*.md"), ROOT / "README.md", *ROOT.glob("packages/*/README.md")])
FENCE = re.compile(r"^```(?P<lang>[\w-]+)[^\n]*\n(?P<code>.*?)^```", re.M | re.S)


# a block that only includes a file (pymdownx.snippets) shows a script of the
# examples gallery: integration-tests/test_examples_gallery.py runs those
INCLUDE = re.compile(r'^--8<-- "[^"\n]+"\n$')


def blocks(page: Path, lang: str) -> list[tuple[int, str]]:
    text = page.read_text()
    return [
        (text.count("\n", 0, m.start()) + 1, m["code"])
        for m in FENCE.finditer(text)
        if m["lang"] == lang and not INCLUDE.match(m["code"])
    ]


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p, "pycon")], ids=page_id)
def test_pycon_examples(page):
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    globs: dict[str, object] = {}
    for line, code in blocks(page, "pycon"):
        test = parser.get_doctest(code, globs, page_id(page), str(page), line)
        runner.run(test, clear_globs=False)
        globs = test.globs  # DocTest copies its globals; carry them to the next block
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} example(s) in {page_id(page)} failed (see above)"


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p, "python")], ids=page_id)
def test_python_examples(page, tmp_path):
    script = "\n".join(
        f"# --- {page_id(page)}:{line}\n{code}" for line, code in blocks(page, "python")
    )
    path = tmp_path / "example.py"
    path.write_text(script)
    done = subprocess.run(
        [sys.executable, str(path)], cwd=tmp_path, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, f"{page_id(page)} examples failed:\n{done.stdout}\n{done.stderr}"
