"""The configuration reference page lists every setting the registry holds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import monarch_config

ROOT = Path(__file__).resolve().parents[2]


def test_the_page_is_generated_from_the_registry() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "config-reference"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    page = (ROOT / "docs" / "api" / "configuration.md").read_text()
    for name, setting in monarch_config.settings().items():
        if setting.owner.startswith("monarch"):
            assert f"| `{name}` |" in page, name
