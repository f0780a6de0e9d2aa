"""``parametrize_config`` and ``parametrize_config_pointwise``: run a pytest
test under several settings, each run inside ``configured(...)``; and
``Encoding``, the message encodings Monarch names.

pytest is imported only when a decorator is made, so this package does not
depend on it.
"""

from __future__ import annotations

import enum
import functools
import inspect
import itertools
from collections.abc import Callable, Iterable
from typing import Any

from ._registry import configured

__all__ = ["Encoding", "parametrize_config", "parametrize_config_pointwise"]


class Encoding(enum.Enum):
    """Message encoding formats, as Monarch names them (``Bincode``, ``Json``,
    ``Multipart``).

    Accepted for compatibility wherever Monarch takes one; Monarch in Python
    always encodes messages with its own codec (msgpack headers, pickled
    payloads with out-of-band buffers), whichever is named.
    """

    Bincode = 0
    """Monarch's compact binary encoding."""
    Json = 1
    """JSON."""
    Multipart = 2
    """Monarch's default: a header with out-of-band parts."""


_ARG = "_config_overrides"


def _decorator(
    combinations: list[tuple[Any, ...]], keys: list[str]
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    import pytest

    ids = ["-".join(f"{k}={v}" for k, v in zip(keys, combo, strict=True)) for combo in combinations]
    overrides = [dict(zip(keys, combo, strict=True)) for combo in combinations]

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(fn)
        parameters = [inspect.Parameter(_ARG, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        new_signature = signature.replace(parameters=[*parameters, *signature.parameters.values()])
        wrapped: Callable[..., Any]
        if inspect.iscoroutinefunction(fn):

            async def async_wrapper(
                _config_overrides: dict[str, Any], *args: Any, **kwargs: Any
            ) -> Any:
                with configured(**_config_overrides):
                    return await fn(*args, **kwargs)

            wrapped = async_wrapper
        else:

            def sync_wrapper(_config_overrides: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
                with configured(**_config_overrides):
                    return fn(*args, **kwargs)

            wrapped = sync_wrapper
        functools.update_wrapper(wrapped, fn)
        setattr(wrapped, "__signature__", new_signature)  # noqa: B010 (inspect reads it)
        marked: Callable[..., Any] = pytest.mark.parametrize(_ARG, overrides, ids=ids)(wrapped)
        return marked

    return decorator


def parametrize_config(
    **config_options: Iterable[Any],
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A pytest decorator that runs the test once per combination of the
    given settings' values (their cartesian product), each run inside
    ``configured(...)`` with that combination.

    Args:
        **config_options: setting names, each with the values to try (a set or
            any iterable).

    Returns:
        A decorator for a test function, sync or ``async``.

    Raises:
        ValueError: no setting is given.

    Examples:
        >>> @parametrize_config(cleanup_timeout={"5s", "10s"})
        ... def test_cleanup():
        ...     ...
    """
    if not config_options:
        raise ValueError("parametrize_config requires at least one config option")
    keys = list(config_options)
    return _decorator(list(itertools.product(*(list(config_options[k]) for k in keys))), keys)


def parametrize_config_pointwise(
    **config_options: Iterable[Any],
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Like ``parametrize_config``, but the settings' values are taken in
    lockstep: the test runs once per position, with each setting's value at
    that position.

    Args:
        **config_options: setting names, each with an ordered sequence of values;
            every sequence has the same length.

    Returns:
        A decorator for a test function, sync or ``async``.

    Raises:
        ValueError: no setting is given, or the sequences differ in length.
    """
    if not config_options:
        raise ValueError("parametrize_config_pointwise requires at least one config option")
    keys = list(config_options)
    values = [list(config_options[k]) for k in keys]
    if len({len(v) for v in values}) != 1:
        lengths = {k: len(v) for k, v in zip(keys, values, strict=True)}
        raise ValueError(
            "parametrize_config_pointwise requires every option to have the same number "
            f"of values; got lengths {lengths}"
        )
    return _decorator(list(zip(*values, strict=True)), keys)
