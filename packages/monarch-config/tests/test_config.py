"""The registry, its layers and kinds, and the generated reference."""

from __future__ import annotations

import doctest
import itertools
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

import monarch_config
from monarch_config import (
    Bool,
    Choice,
    Duration,
    Int,
    Size,
    Text,
    _kinds,
    _registry,
    clear_runtime_config,
    configure,
    configured,
    declare,
    format_duration,
    get_global_config,
    get_runtime_config,
    inherit,
    parse_duration,
    reference_markdown,
    runtime_values,
)

_names = itertools.count()


def fresh(prefix: str = "test_setting") -> str:
    return f"{prefix}_{next(_names)}"


@pytest.fixture(autouse=True)
def _clean_runtime_layer() -> Iterator[None]:
    yield
    clear_runtime_config()


def test_layers_runtime_over_environment_over_default(monkeypatch: pytest.MonkeyPatch) -> None:
    name = fresh()
    setting = declare(name, Duration(), 5.0, env=("OURS_WAIT", "THEIRS_WAIT"), doc="d", owner="t")
    assert setting.get() == 5.0
    monkeypatch.setenv("THEIRS_WAIT", "1m")
    assert setting.get() == 60.0
    monkeypatch.setenv("OURS_WAIT", "250ms")  # the first variable wins
    assert setting.get() == 0.25
    configure(**{name: "1h 30m"})
    assert setting.get() == 5400.0
    assert get_runtime_config()[name] == "1h 30m"
    clear_runtime_config()
    assert setting.get() == 0.25
    monkeypatch.setenv("OURS_WAIT", "  ")  # empty is unset
    assert setting.get() == 60.0


def test_a_bad_environment_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    name = fresh()
    setting = declare(name, Int(minimum=1), 16, env="TEST_FANOUT", doc="d", owner="t")
    monkeypatch.setenv("TEST_FANOUT", "many")
    with pytest.raises(ValueError, match=rf"TEST_FANOUT='many' .* setting `{name}`.*an integer"):
        setting.get()
    monkeypatch.setenv("TEST_FANOUT", "0")
    with pytest.raises(ValueError, match="at least 1"):
        setting.get()


def test_unknown_keys_and_wrong_types_are_monarchs_errors() -> None:
    name = fresh()
    declare(name, Duration(), 30.0, doc="d", owner="t")
    with pytest.raises(ValueError, match="invalid configuration key: `nonexistent_key`"):
        configure(nonexistent_key=1)
    with pytest.raises(TypeError, match=rf"invalid value `\[5\]` for configuration key `{name}`"):
        configure(**{name: [5]})
    with pytest.raises(ValueError, match=rf"invalid value `'soon'` for configuration key `{name}`"):
        configure(**{name: "soon"})


def test_configure_sets_all_or_nothing() -> None:
    good, bad = fresh(), fresh()
    declare(good, Bool(), False, doc="d", owner="t")
    declare(bad, Int(minimum=0), 1, doc="d", owner="t")
    with pytest.raises(ValueError):
        configure(**{good: True, bad: -1})
    assert good not in get_runtime_config()


def test_configured_restores_the_runtime_layer() -> None:
    name, other = fresh(), fresh()
    setting = declare(name, Duration(), 300.0, doc="d", owner="t")
    declare(other, Text(optional=True), None, doc="d", owner="t")
    configure(**{other: "kept"})
    with configured(**{name: 90}) as config:
        assert config[name] == "1m 30s"
        assert config[other] == "kept"
        assert setting.get() == 90.0
    assert setting.get() == 300.0
    assert get_runtime_config() == {other: "kept"}
    with pytest.raises(RuntimeError), configured(**{name: 1}):
        raise RuntimeError("the block failed")
    assert name not in get_runtime_config()


def test_global_config_shows_durations_as_monarch_does() -> None:
    name = fresh()
    declare(name, Duration(), 300.0, doc="d", owner="t")
    assert get_global_config()[name] == "5m"


def test_declaring_again_is_allowed_only_for_the_same_setting() -> None:
    name = fresh()
    first = declare(name, Int(), 1, env="X_ONE", doc="d", owner="t")
    assert declare(name, Int(), 1, env="X_ONE", doc="d", owner="t") is first
    with pytest.raises(ValueError, match=f"`{name}` is declared twice: by t first"):
        declare(name, Int(), 2, doc="d", owner="other")


def test_a_child_process_inherits_the_runtime_layer() -> None:
    name = fresh()
    setting = declare(name, Size(), 1024, doc="d", owner="t")
    configure(**{name: "4GiB"})
    values = runtime_values()
    assert values == {name: 4 << 30}
    clear_runtime_config()
    later = fresh()  # declared in the child only after it inherited
    inherit({**values, later: 7.0})
    assert setting.get() == 4 << 30
    assert declare(later, Duration(), 1.0, doc="d", owner="t").get() == 7.0


def test_kinds_parse_and_check() -> None:
    assert Bool().parse("on") is True and Bool().parse("No") is False
    with pytest.raises(ValueError, match="not a boolean"):
        Bool().parse("maybe")
    with pytest.raises(TypeError):
        Bool().check(1)
    assert Size().parse("512 MiB") == 512 << 20 and Size().check(4096) == 4096
    with pytest.raises(ValueError, match="not a size"):
        Size().parse("lots")
    assert Choice(choices=("socket", "nng")).parse(" NNG ") == "nng"
    with pytest.raises(ValueError, match="not one of"):
        Choice(choices=("socket", "nng")).check("zmq")
    assert Text(optional=True).parse("") is None
    with pytest.raises(ValueError, match="positive"):
        Duration().check(0)
    assert Duration(positive=False).check(0) == 0.0
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("5 fortnights")
    with pytest.raises(TypeError):
        Duration().check(True)


@given(st.integers(min_value=0, max_value=10**7))
def test_durations_read_back_as_they_are_shown(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


@given(st.integers(min_value=1, max_value=999))
def test_milliseconds_read_back(millis: int) -> None:
    assert parse_duration(format_duration(millis / 1000)) == pytest.approx(millis / 1000)


def test_reference_lists_each_owners_settings() -> None:
    name = fresh("aa_reference")
    setting = declare(
        name,
        Choice(choices=("a", "b")),
        "a",
        env=("AA_REF", "AA_REF_OLD"),
        doc="Picks | one.",
        owner="zz-test",
    )
    text = reference_markdown([setting])
    assert text.startswith("### zz-test\n")
    row = f'| `{name}` | `"a"` | `AA_REF`<br>`AA_REF_OLD` | one of `a`, `b` | Picks \\| one. |'
    assert row in text


@pytest.mark.parametrize("module", [monarch_config, _kinds, _registry])
def test_docstring_examples(module: object) -> None:
    assert doctest.testmod(module).failed == 0  # type: ignore[arg-type]
