"""The registry: every setting of every package, and the layers that give
each its value.

A setting's value is, from the first layer that has one: what ``configure``
set in this process (the *runtime* layer, which processes spawned from here
inherit), its environment variables, its default. Packages declare their
settings at import and read them through the returned ``Setting``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ._kinds import Kind

__all__ = [
    "ENTRY_POINT_GROUP",
    "Setting",
    "clear_runtime_config",
    "configure",
    "configured",
    "declare",
    "generation",
    "get_global_config",
    "get_runtime_config",
    "inherit",
    "runtime_values",
    "settings",
]

T = TypeVar("T")
_MISSING: Any = object()
ENTRY_POINT_GROUP = "monarch.settings"
"""Packages name the module that declares their settings in this entry-point
group, so that every setting is known before its package is imported."""
_log = logging.getLogger(__name__)
_loaded = False

_lock = threading.RLock()
_registry: dict[str, Setting[Any]] = {}
_runtime: dict[str, Any] = {}
_generation = 0  # counts changes of the runtime layer, for caches built on settings


def _changed() -> None:
    global _generation
    _generation += 1


def generation() -> int:
    """A number that changes whenever the runtime layer does.

    Returns:
        The count of changes so far: a cache of values derived from settings
        is stale when it differs from the count the cache was built at.
    """
    return _generation


@dataclass(frozen=True, eq=False)
class Setting(Generic[T]):
    """One setting: its name, kind, default, environment variables and meaning.

    Made by ``declare``; ``get()`` reads its value.

    Attributes:
        name: the key ``configure`` takes (Monarch's key where Monarch has
            the setting).
        kind: what its values are (``monarch_config.Duration()``, ...).
        default: the value when no layer gives one.
        env: the environment variables read, first set one wins (ours, then
            Monarch's name where it has one).
        doc: what it changes, in a sentence or two.
        owner: the distribution that declared it.
    """

    name: str
    kind: Kind
    default: T
    env: tuple[str, ...]
    doc: str
    owner: str
    _parsed: dict[tuple[str, str], Any] = field(default_factory=dict, repr=False)

    def get(self) -> T:
        """The value in force in this process.

        Returns:
            The runtime layer's value, else the first environment variable
            set (parsed), else the default.

        Raises:
            ValueError: the environment variable in force holds no value of
                this setting's kind; the message names the variable.
        """
        value = _runtime.get(self.name, _MISSING)
        if value is not _MISSING:
            return value  # type: ignore[no-any-return]
        for variable in self.env:
            text = os.environ.get(variable)
            if text is not None and text.strip():
                return self._from_env(variable, text)
        return self.default

    def _from_env(self, variable: str, text: str) -> T:
        key = (variable, text)
        parsed = self._parsed.get(key, _MISSING)
        if parsed is _MISSING:
            try:
                parsed = self.kind.parse(text)
            except (TypeError, ValueError) as error:
                raise ValueError(
                    f"{variable}={text!r} is not a valid value for the setting `{self.name}`: "
                    f"{error}; expected {self.kind.what}"
                ) from None
            self._parsed[key] = parsed
        return parsed  # type: ignore[no-any-return]


def declare(
    name: str,
    kind: Kind,
    default: T,
    *,
    env: str | tuple[str, ...] = (),
    doc: str,
    owner: str,
) -> Setting[T]:
    """Add a setting to the registry (at a package's import).

    Args:
        name: the key ``configure`` takes; lower case with underscores.
        kind: what its values are.
        default: the value when neither ``configure`` nor the environment
            gives one.
        env: the environment variable(s) read, first set one wins.
        doc: what it changes, for the configuration reference.
        owner: the declaring distribution (``"monarch-actor"``).

    Returns:
        The setting; ``setting.get()`` reads it.

    Raises:
        ValueError: a different setting already has this name.
    """
    variables = (env,) if isinstance(env, str) else tuple(env)
    setting = Setting(name, kind, default, variables, doc, owner)
    with _lock:
        existing = _registry.get(name)
        if existing is not None:
            same = (existing.kind, existing.default, existing.env, existing.owner) == (
                kind,
                default,
                variables,
                owner,
            )
            if same:
                return existing  # a module imported twice (importlib mode) declares again
            raise ValueError(f"the setting `{name}` is declared twice: by {existing.owner} first")
        _registry[name] = setting
    return setting


def _load_declarations() -> None:
    """Import every installed package's settings module (once)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    import importlib.metadata  # here: importing it costs every process ~15 ms at start

    for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            point.load()
        except Exception as error:  # one broken package must not hide the others' settings
            _log.warning("the settings of %s could not be loaded: %s", point.name, error)


def settings() -> Mapping[str, Setting[Any]]:
    """Every setting of every installed package, by name.

    Returns:
        A read-only view, in declaration order: the settings of the packages
        installed (found through the ``monarch.settings`` entry points) and
        of any other module that declared some.
    """
    _load_declarations()
    return _registry


def _checked(name: str, value: Any) -> Any:
    setting = _registry.get(name) or settings().get(name)
    if setting is None:
        raise ValueError(
            f"invalid configuration key: `{name}` (known keys: `get_global_config()` lists them)"
        )
    try:
        return setting.kind.check(value)
    except (TypeError, ValueError) as error:
        raise type(error)(
            f"invalid value `{value!r}` for configuration key `{name}`: {error} "
            f"(expected {setting.kind.what})"
        ) from None


def configure(**settings: Any) -> None:
    """Set settings in this process's runtime layer (over the environment).

    Processes spawned from here afterwards start with the same runtime
    layer. Either every setting given is set or, on an error, none.

    Args:
        settings: keys and values, such as ``cleanup_timeout="10s"``.

    Raises:
        ValueError: a key is unknown, or a value is out of range.
        TypeError: a value is not of its setting's kind.

    Examples:
        >>> import monarch_config
        >>> timeout = monarch_config.declare(
        ...     "example_timeout", monarch_config.Duration(), 30.0,
        ...     doc="How long the example waits.", owner="docs",
        ... )
        >>> monarch_config.configure(example_timeout="1m 30s")
        >>> timeout.get()
        90.0
        >>> monarch_config.get_runtime_config()["example_timeout"]
        '1m 30s'
        >>> monarch_config.clear_runtime_config()
    """
    checked = {name: _checked(name, value) for name, value in settings.items()}
    with _lock:
        _runtime.update(checked)
        _changed()


def get_runtime_config() -> dict[str, Any]:
    """What ``configure`` set in this process, as users write it.

    Returns:
        Key to value; durations as text (``"5m"``).
    """
    with _lock:
        return {name: _show(name, value) for name, value in _runtime.items()}


def _show(name: str, value: Any) -> Any:
    setting = _registry.get(name)
    return value if setting is None else setting.kind.show(value)


def clear_runtime_config() -> None:
    """Forget what ``configure`` set: the environment and defaults apply again."""
    with _lock:
        _runtime.clear()
        _changed()


def get_global_config() -> dict[str, Any]:
    """Every setting's value in force in this process, as users write it.

    Returns:
        Key to value, for every setting of every installed package;
        durations as text (``"5m"``).

    Raises:
        ValueError: an environment variable holds no valid value.
    """
    return {name: setting.kind.show(setting.get()) for name, setting in list(settings().items())}


@contextlib.contextmanager
def configured(**settings: Any) -> Iterator[dict[str, Any]]:
    """Set settings for the length of a ``with`` block, then put back the
    runtime layer as it was.

    Args:
        settings: keys and values, as ``configure`` takes them.

    Yields:
        The whole configuration in force inside the block
        (``get_global_config()``).

    Raises:
        ValueError: a key is unknown, or a value is out of range.
        TypeError: a value is not of its setting's kind.
    """
    with _lock:
        saved = dict(_runtime)
    configure(**settings)
    try:
        yield get_global_config()
    finally:
        with _lock:
            _runtime.clear()
            _runtime.update(saved)
            _changed()


def runtime_values() -> dict[str, Any]:
    """The runtime layer's values as the program holds them (durations in
    seconds), for handing to a process spawned from here.

    Returns:
        Key to value; ``configure(**runtime_values())`` in the new process
        reproduces the layer.
    """
    with _lock:
        return dict(_runtime)


def inherit(values: Mapping[str, Any]) -> None:
    """Start this process's runtime layer from its parent's ``runtime_values()``.

    The values were checked where they were set; a key whose package this
    process has not imported yet is kept for when it is.

    Args:
        values: the parent's runtime layer.
    """
    with _lock:
        _runtime.update(values)
        _changed()
