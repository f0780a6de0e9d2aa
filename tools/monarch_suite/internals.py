"""Stand-ins for Monarch's internal modules, so that its test files collect here.

Monarch's test files import its internals at module level (``monarch._src...``,
``monarch._rust_bindings...``, ``monarch._testing``) next to the public API. This
workspace provides the public objects only, so such a file would not even import,
and its tests that use nothing but the public API would go unchecked. This hook
lets those imports succeed with stand-ins: a module Monarch has and this workspace
lacks, or a name an internal module lacks, becomes an :class:`Internal`. Touching
one while a test runs (calling it, reading an attribute, iterating, ...) records the
test as one that uses Monarch's internals, so it is judged by nothing here.

Only for the suite runner (``tools/monarch-suite``); never installed with a package.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import types
from typing import Any

RECORD = os.environ.get("MONARCH_SUITE_RECORD", "")

# Monarch modules that are internal although no part of their name starts with "_".
_INTERNAL_ROOTS = (
    "monarch.common", "monarch.worker", "monarch.mesh_controller", "monarch.simulator",
    "monarch.controller", "monarch.gradient_generator", "monarch.cached_remote_function",
    "monarch.fetch", "monarch.notebook", "monarch.opaque_module", "monarch.opaque_object",
    "monarch.profiler", "monarch.timer", "monarch.tensor_worker_main",
)


def is_internal(module: str) -> bool:
    """Whether ``module`` is one of Monarch's internal modules (not its public API)."""
    if not module.startswith("monarch."):
        return False
    if any(part.startswith("_") for part in module.split(".")[1:]):
        return True
    return module.startswith(_INTERNAL_ROOTS)


class InternalUsed(Exception):
    """A test touched one of Monarch's internals, which this workspace does not have."""


def _touched(name: str) -> None:
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    if RECORD and current:
        test = current.rsplit(" ", 1)[0]
        with open(RECORD, "a") as record:
            record.write(f"{test}\t{name}\n")


class _InternalMeta(type):
    # A class, so test files may subclass an internal or annotate with one at import.
    def __getattr__(cls, attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        _touched(f"{cls.__qualname__}.{attribute}")
        return internal(f"{cls.__qualname__}.{attribute}")

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if not os.environ.get("PYTEST_CURRENT_TEST"):
            # At import (a decorator, a module constant): give something back.
            return internal(f"{cls.__qualname__}()")
        _touched(cls.__qualname__)
        raise InternalUsed(f"{cls.__qualname__} is one of Monarch's internals, not provided here")

    def __iter__(cls) -> Any:
        _touched(cls.__qualname__)
        raise InternalUsed(f"{cls.__qualname__} is one of Monarch's internals, not provided here")

    def __getitem__(cls, key: Any) -> Any:
        return cls


def internal(name: str) -> type:
    """A stand-in for Monarch's internal object ``name``."""
    return _InternalMeta(name, (), {"__module__": name.rpartition(".")[0] or name})


def _fallback_getattr(module: types.ModuleType) -> None:
    original = getattr(module, "__getattr__", None)

    def __getattr__(name: str) -> Any:
        if original is not None:
            try:
                return original(name)
            except AttributeError:
                pass
        if name.startswith("__"):
            raise AttributeError(name)
        return internal(f"{module.__name__}.{name}")

    module.__getattr__ = __getattr__  # type: ignore[method-assign]


class _Loader(importlib.abc.Loader):
    def __init__(self, real: importlib.abc.Loader | None) -> None:
        self.real = real

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        if self.real is not None:
            return self.real.create_module(spec)
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        if self.real is not None:
            self.real.exec_module(module)
        else:
            module.__path__ = []  # a package, so its submodules can be stand-ins too
        _fallback_getattr(module)


class InternalsFinder(importlib.abc.MetaPathFinder):
    """Finds Monarch's internal modules: the real one where this workspace has it,
    else a stand-in."""

    def find_spec(
        self, fullname: str, path: Any, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not is_internal(fullname):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                spec.loader = _Loader(spec.loader)
                return spec
        return importlib.machinery.ModuleSpec(fullname, _Loader(None), is_package=True)


def install() -> None:
    """Put the finder first on ``sys.meta_path`` and patch internal modules already imported."""
    if any(isinstance(f, InternalsFinder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, InternalsFinder())
    for name, module in list(sys.modules.items()):
        if is_internal(name):
            _fallback_getattr(module)
