"""tools/release: the checks before a release, and a real build of a small package.

The checks run on small workspaces made here (two packages, a changelog);
the build runs on this repository's monarch-mesh, with build and twine as
installed in the test environment (build fetches hatchling from the package
index into a fresh environment, as it does for a real release).
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RELEASE = ROOT / "tools" / "release"
LICENSE = (ROOT / "LICENSE").read_text()
URL = "https://example.org/monarch-in-python"


def release(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(RELEASE), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def package(root: Path, name: str, version: str, dependencies: list[str]) -> None:
    folder = root / "packages" / name
    (folder / "src" / name.replace("-", "_")).mkdir(parents=True)
    (folder / "src" / name.replace("-", "_") / "__init__.py").write_text("")
    (folder / "README.md").write_text(f"# {name}\n")
    (folder / "LICENSE").write_text(LICENSE)
    deps = ", ".join(f'"{d}"' for d in dependencies)
    (folder / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\nversion = "{version}"\nlicense = "BSD-3-Clause"\n'
        f'dependencies = [{deps}]\n\n[project.urls]\nSource = "{URL}"\n'
    )


def workspace(
    tmp_path: Path,
    *,
    base: str = "0.3.0",
    top: str = "0.3.0",
    requirement: str = "base-pkg>=0.3",
    changelog: str = "## 0.3.0 (2026-01-02)\n\n- what changed\n",
) -> Path:
    root = tmp_path / "ws"
    package(root, "base-pkg", base, [])
    package(root, "top-pkg", top, [requirement, "msgpack>=1.0"])
    (root / "LICENSE").write_text(LICENSE)
    (root / "docs").mkdir()
    (root / "docs" / "changelog.md").write_text("# Changelog\n\n" + changelog)
    return root


def test_help():
    done = release("--help")
    assert done.returncode == 0
    assert "twine check" in done.stdout and "--check" in done.stdout


def test_a_consistent_workspace_passes_and_prints_its_changelog_entry(tmp_path):
    done = release("--root", workspace(tmp_path), "--check", "--final", "--version", "0.3.0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "## 0.3.0 (2026-01-02)" in done.stdout and "- what changed" in done.stdout


@pytest.mark.parametrize("bad", ["base-pkg>=0.4", "base-pkg<0.3", "base-pkg==0.2.*"])
def test_a_sibling_range_that_excludes_the_siblings_version_fails(tmp_path, bad):
    done = release("--root", workspace(tmp_path, requirement=bad), "--check")
    assert done.returncode == 1
    assert f"top-pkg requires '{bad}'" in done.stdout
    assert "does not admit base-pkg 0.3.0" in done.stdout
    assert "msgpack" not in done.stdout  # only siblings are held to the release's version


def test_a_sibling_requirement_with_no_range_fails(tmp_path):
    done = release("--root", workspace(tmp_path, requirement="base-pkg"), "--check")
    assert done.returncode == 1
    assert "with no version range" in done.stdout and ">=0.3.0" in done.stdout


def test_packages_released_together_share_one_version(tmp_path):
    done = release("--root", workspace(tmp_path, top="0.3.1"), "--check")
    assert done.returncode == 1
    assert "do not share one version" in done.stdout
    assert "top-pkg 0.3.1" in done.stdout


def test_the_changelog_needs_an_entry_for_the_version(tmp_path):
    root = workspace(tmp_path, changelog="## 0.2.0 (2025-12-01)\n\n- older\n")
    done = release("--root", root, "--check")
    assert done.returncode == 1
    assert "no entry for 0.3.0" in done.stdout


def test_a_final_release_needs_a_date(tmp_path):
    root = workspace(tmp_path, changelog="## 0.3.0 (unreleased)\n\n- what changed\n")
    assert release("--root", root, "--check").returncode == 0
    done = release("--root", root, "--check", "--final")
    assert done.returncode == 1
    assert "marked unreleased" in done.stdout


def test_a_package_without_its_license_file_is_not_built(tmp_path):
    root = workspace(tmp_path)
    (root / "packages" / "top-pkg" / "LICENSE").unlink()
    done = release("--root", root, "top-pkg", "--out", tmp_path / "dist")
    assert done.returncode == 1
    assert "no LICENSE" in done.stdout
    assert not (tmp_path / "dist").exists()


def test_builds_monarch_mesh_and_its_metadata_passes_twine(tmp_path):
    done = release("monarch-mesh", "--out", tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "twine check passed" in done.stdout
    version = next(
        line.split('"')[1]
        for line in (ROOT / "packages" / "monarch-mesh" / "pyproject.toml").read_text().splitlines()
        if line.startswith("version")
    )
    sdist = tmp_path / f"monarch_mesh-{version}.tar.gz"
    wheel = tmp_path / f"monarch_mesh-{version}-py3-none-any.whl"
    assert sdist.exists() and wheel.exists()
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata = zf.read(f"monarch_mesh-{version}.dist-info/METADATA").decode()
    assert f"monarch_mesh-{version}.dist-info/licenses/LICENSE" in names
    assert "monarch_mesh/__init__.py" in names
    assert "License-Expression: BSD-3-Clause" in metadata
    assert "Project-URL: Source, " in metadata
