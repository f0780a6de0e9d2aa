"""The current job of a project folder: ``set_current_job`` records a job
spec's import path, ``load_current_job`` imports it again."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

from ._job import JobTrait

__all__ = ["SPEC_PATH", "import_job", "load_current_job", "set_current_job"]

SPEC_PATH = ".monarch/spec"
"""Where ``set_current_job`` records the current job's import path."""


def import_job(spec: str) -> JobTrait:
    """The job object at ``spec``: ``module.attr`` or ``module:attr``, imported
    with the current folder on the import path."""
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
    else:
        module_name, _, attr = spec.rpartition(".")
    if not module_name or not attr:
        raise ValueError(
            f"a job spec is 'module.attr' or 'module:attr' naming a job object, got {spec!r}"
        )
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise ValueError(
            f"cannot import {module_name!r} for the job spec {spec!r}: {error}; run from the "
            "folder that holds it, or put it on PYTHONPATH"
        ) from None
    job = getattr(module, attr, None)
    if job is None:
        raise ValueError(f"module {module_name!r} has no {attr!r} for the job spec {spec!r}")
    if not isinstance(job, JobTrait):
        raise TypeError(f"{spec!r} is a {type(job).__name__}, not a job (JobTrait)")
    return job


def set_current_job(module_path: str) -> None:
    """Record a job spec as the current job of this folder.

    The spec is imported first, to check that it names a job; then its path
    is written to ``.monarch/spec``, where ``load_current_job`` finds it.

    Args:
        module_path: the job object's import path, ``module.attr`` (or
            ``module:attr``), importable from the current folder.

    Raises:
        ValueError: the module cannot be imported or has no such attribute.
        TypeError: the attribute is not a job (``JobTrait``).
    """
    import_job(module_path)
    path = Path(SPEC_PATH)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(module_path + "\n")


def load_current_job() -> JobTrait:
    """Import again the job that ``set_current_job`` recorded in this folder.

    The job object is a fresh one; ``.state()`` on it reuses the running job
    cached for this folder.

    Returns:
        The recorded job spec's job object.

    Raises:
        FileNotFoundError: no current job is recorded here.
        ValueError: the recorded spec no longer imports.
        TypeError: the recorded spec no longer names a job.
    """
    try:
        spec = Path(SPEC_PATH).read_text().strip()
    except FileNotFoundError:
        raise FileNotFoundError(
            f"no current job recorded at {SPEC_PATH}: run `monarch apply module.attr` (or "
            "set_current_job('module.attr')) first"
        ) from None
    return import_job(spec)
