"""Checked by mypy --strict in the lint step (never run): ``traced`` keeps the
type of what it wraps, bare or with a name, and ``span`` gives a span."""

from typing import assert_type

from opentelemetry.trace import Span

from monarch_actor import get_meter, span, traced


@traced
def tokenize(text: str) -> list[str]:
    return text.split()


@traced(name="fetch_weights")
async def fetch(path: str) -> bytes:
    return path.encode()


async def check() -> None:
    assert_type(tokenize("a b"), list[str])
    assert_type(await fetch("w"), bytes)
    tokenize(3)  # type: ignore[arg-type]
    with span("step") as current:
        assert_type(current, Span)
    get_meter().create_counter("steps").add(1, {"phase": "warmup"})
