"""Telemetry of actors: OpenTelemetry spans (``traced``, ``span``, endpoints
made with ``instrument=True``) and metrics (``get_meter``) on the
OpenTelemetry API. The SDK that each process sets up when the settings
``otel_tracing`` / ``otel_metrics`` (``ENABLE_OTEL_TRACING`` /
``ENABLE_OTEL_METRICS``) ask for it is ``sdk``'s.

Until a tracer provider is set in the process (by the program itself or by
those settings), a span costs one check: ``span`` hands out a shared no-op.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import socket
from collections.abc import Callable, Mapping
from typing import Any, ParamSpec, TypeVar, overload

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import Status, StatusCode
from opentelemetry.util.types import AttributeValue

from .._core.current import current
from .recorder import SharedAttributes, SpanRecorder

__all__ = [
    "active_tracer",
    "actor_attributes",
    "enter_span",
    "get_meter",
    "instrumented",
    "leave_span",
    "recorder",
    "span",
    "traced",
    "tracing_active",
    "use_recorder",
]

P = ParamSpec("P")
R = TypeVar("R")

log = logging.getLogger("monarch.actor.telemetry")

SCOPE = "monarch"  # the instrumentation scope of our tracer and meter, as in Monarch
_meter = metrics.get_meter(SCOPE)  # a proxy: it and its instruments follow the provider once set
_HOST = socket.gethostname()

# -- spans ------------------------------------------------------------------------------

_tracer: trace.Tracer | None = None  # the global provider's, once one is set (it stays)
_UNKNOWN = object()
_PROVIDER_FROM_ENV = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
_recorder: SpanRecorder | None = None  # Monarch's own, once ENABLE_OTEL_TRACING set it up


def active_tracer() -> trace.Tracer | None:
    """The tracer spans are made with: Monarch's own exporting recorder
    where ``ENABLE_OTEL_TRACING`` set one up, else the global tracer
    provider's once one is set in this process; ``None`` until then (spans
    are then skipped)."""
    global _tracer
    tracer = _recorder or _tracer
    if tracer is not None:
        return tracer
    # Until a provider is set, this runs around every endpoint call: the API's
    # own global says "none yet" in one read, where ``get_tracer_provider``
    # looks the environment up each time (0.6 µs). A provider named by the
    # environment is loaded by ``get_tracer_provider``, which sets that global.
    if getattr(trace, "_TRACER_PROVIDER", _UNKNOWN) is None and not _PROVIDER_FROM_ENV:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider):
        return None
    # the provider's own tracer, not the API's proxy: a proxy costs a
    # delegation and a second context manager per span
    tracer = _tracer = provider.get_tracer(SCOPE)
    return tracer


def use_recorder(made: SpanRecorder) -> None:
    """Make ``made`` the tracer of Monarch's own spans (``sdk`` sets it up
    when ``ENABLE_OTEL_TRACING`` asks for it)."""
    global _recorder
    _recorder = made


def recorder() -> SpanRecorder | None:
    """Monarch's own span recorder, once ``use_recorder`` set one."""
    return _recorder


def tracing_active() -> bool:
    """Whether a global tracer provider is set in this process (spans are made)."""
    return active_tracer() is not None


def actor_attributes() -> dict[str, AttributeValue]:
    """The running actor's identity as span attributes; empty outside actors.

    Returns:
        ``monarch.actor.name`` (its mesh's name), ``monarch.actor.class``,
        ``monarch.actor.id``, ``monarch.actor.rank`` (its rank in its mesh),
        ``monarch.actor.point`` (its coordinates), ``monarch.proc`` (its
        process's address) and ``monarch.host`` (the host's name). The dict
        is shared: copy it before changing it.
    """
    ctx = current()
    if ctx is None:
        return {}
    instance = ctx.actor_instance
    found: SharedAttributes | None = instance._span_attributes
    if found is None:
        point = instance.rank
        found = SharedAttributes(
            {
                "monarch.actor.name": instance.name,
                "monarch.actor.class": instance.class_name,
                "monarch.actor.id": instance.actor_id,
                "monarch.actor.rank": point.rank,
                "monarch.actor.point": ",".join(f"{k}={v}" for k, v in point.items()),
                "monarch.proc": instance.proc_id,
                "monarch.host": _HOST,
            }
        )
        instance._span_attributes = found
    return found


def enter_span(
    tracer: trace.Tracer, name: str, attributes: Mapping[str, AttributeValue] | None = None
) -> tuple[trace.Span, object]:
    """Start a span with the running actor's attributes and make it the current one.

    Returns:
        The span and the token ``leave_span`` needs.
    """
    merged = actor_attributes()
    if attributes:
        merged = {**merged, **attributes}
    started = tracer.start_span(name, attributes=merged)
    return started, otel_context.attach(trace.set_span_in_context(started))


def leave_span(started: trace.Span, token: object, error: BaseException | None) -> None:
    """End a span from ``enter_span``; an ``Exception`` that left it is recorded
    on it and sets its status (as OpenTelemetry's own ``use_span`` does)."""
    otel_context.detach(token)  # type: ignore[arg-type]
    if isinstance(error, Exception) and started.is_recording():
        started.record_exception(error)
        started.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
    started.end()


class _Span:
    """What ``span()`` returns once spans are made: a span entered as the current one."""

    __slots__ = ("_attributes", "_name", "_started", "_token", "_tracer")

    def __init__(
        self, tracer: trace.Tracer, name: str, attributes: Mapping[str, AttributeValue] | None
    ) -> None:
        self._tracer = tracer
        self._name = name
        self._attributes = attributes
        self._started: trace.Span = trace.INVALID_SPAN
        self._token: object = None

    def __enter__(self) -> trace.Span:
        self._started, self._token = enter_span(self._tracer, self._name, self._attributes)
        return self._started

    def __exit__(self, kind: object, error: BaseException | None, tb: object) -> None:
        leave_span(self._started, self._token, error)


_NO_SPAN: contextlib.nullcontext[trace.Span] = contextlib.nullcontext(trace.INVALID_SPAN)


def span(
    name: str, attributes: Mapping[str, AttributeValue] | None = None
) -> contextlib.AbstractContextManager[trace.Span]:
    """Time a block of code as an OpenTelemetry span.

    The span is the current one inside the block (spans started there are
    its children) and, inside an actor, carries the actor's identity as
    attributes (see ``traced``). An exception leaving the block is recorded
    on the span. Until a tracer provider is set in the process (by the
    program, or by ``ENABLE_OTEL_TRACING``), the span is a shared no-op.

    Args:
        name: the span's name.
        attributes: more attributes for the span.

    Returns:
        A context manager whose ``with`` gives the ``opentelemetry.trace.Span``.

    Raises:
        TypeError: ``name`` is not a string.
        ValueError: ``name`` is empty.

    Examples:
        >>> from monarch_actor import span
        >>> with span("load_batch") as s:
        ...     s.set_attribute("batch.size", 32)
    """
    _check_name(name, "span")
    tracer = active_tracer()
    if tracer is None:
        return _NO_SPAN
    return _Span(tracer, name, attributes)


def _check_name(name: object, what: str) -> None:
    if not isinstance(name, str):
        raise TypeError(f"{what}() takes the span's name as a str, got {type(name).__name__}")
    if not name:
        raise ValueError(f"{what}() needs a non-empty span name")


@overload
def traced(fn: Callable[P, R], /) -> Callable[P, R]: ...
@overload
def traced(*, name: str | None = None) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
def traced(fn: Callable[..., Any] | None = None, /, *, name: str | None = None) -> Any:
    """Run each call of a function inside a span (``@traced`` or ``@traced(name=...)``).

    Works on plain and ``async`` functions. Inside an actor the span carries
    the actor's identity as attributes: ``monarch.actor.name``,
    ``monarch.actor.class``, ``monarch.actor.id``, ``monarch.actor.rank``,
    ``monarch.actor.point``, ``monarch.proc`` and ``monarch.host``. Spans are
    exported where the process has an OpenTelemetry SDK set up: its own, or
    the one ``ENABLE_OTEL_TRACING`` sets up.

    Args:
        fn: the function, when used bare.
        name: the span's name; the function's ``__name__`` when not given.

    Returns:
        The wrapped function; with ``fn`` omitted, a decorator that wraps one.

    Raises:
        TypeError: what is decorated is not callable or is a generator
            function, or ``name`` is not a string (the name goes in
            ``name=``: ``@traced(name="load")``).
        ValueError: ``name`` is empty.

    Examples:
        >>> from monarch_actor import traced
        >>> @traced
        ... def tokenize(text: str) -> list[str]:
        ...     return text.split()
        >>> @traced(name="fetch_weights")
        ... async def fetch() -> bytes:
        ...     return b""
        >>> tokenize("a b")
        ['a', 'b']
    """
    if fn is not None and not callable(fn):
        raise TypeError(
            f"traced takes a function, got {type(fn).__name__} {fn!r} (give a span name as "
            "@traced(name=...))"
        )
    if name is not None:
        _check_name(name, "traced")

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        if not callable(function):
            raise TypeError(f"@traced decorates a function, not {type(function).__name__}")
        if inspect.isgeneratorfunction(function) or inspect.isasyncgenfunction(function):
            raise TypeError(
                f"@traced cannot time the generator {function.__qualname__} across its "
                "yields; use `with span(...)` inside it instead"
            )
        label = name or getattr(function, "__name__", None) or type(function).__name__
        return _wrap(function, label)

    return decorate if fn is None else decorate(fn)


def instrumented(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` run inside a span named after it, for ``@endpoint(instrument=True)``."""
    return _wrap(method, method.__name__)


def _wrap(function: Callable[..., Any], label: str) -> Callable[..., Any]:
    # The wrappers name only functions of this module, no variables: a class
    # that travels by value (cloudpickle) takes functions by reference, so
    # they keep reading this process's state. The span is entered inline,
    # without a context manager: this runs around every endpoint call.
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            tracer = active_tracer()
            if tracer is None:
                return await function(*args, **kwargs)
            started, token = enter_span(tracer, label)
            error: BaseException | None = None
            try:
                return await function(*args, **kwargs)
            except BaseException as raised:
                error = raised
                raise
            finally:
                leave_span(started, token, error)

        return run_async

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        tracer = active_tracer()
        if tracer is None:
            return function(*args, **kwargs)
        started, token = enter_span(tracer, label)
        error: BaseException | None = None
        try:
            return function(*args, **kwargs)
        except BaseException as raised:
            error = raised
            raise
        finally:
            leave_span(started, token, error)

    return run


# -- metrics ----------------------------------------------------------------------------


class _Instrument:
    """An instrument of Monarch's meter, as its ``create_*`` made it, that
    pickles as the call that made it: sent to another process (a global of a
    class or function from ``__main__``, an endpoint's argument), it is that
    process's instrument of the same kind and name, recording to its own
    provider. The instrument itself (the SDK's holds locks) never travels."""

    def __init__(self, made_by: tuple[str, tuple[Any, ...], dict[str, Any]], inner: Any) -> None:
        self._made_by = made_by
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in ("_inner", "_made_by"):  # not set yet: no recursion through _inner
            raise AttributeError(name)
        return getattr(self._inner, name)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_instrument, self._made_by)

    def __repr__(self) -> str:
        kind, args, kwargs = self._made_by
        name = args[0] if args else kwargs.get("name")
        return f"<monarch {kind.removeprefix('create_')} {name!r}>"


class _Counter(_Instrument, metrics.Counter):
    def add(self, *args: Any, **kwargs: Any) -> None:
        self._inner.add(*args, **kwargs)


class _UpDownCounter(_Instrument, metrics.UpDownCounter):
    def add(self, *args: Any, **kwargs: Any) -> None:
        self._inner.add(*args, **kwargs)


class _Histogram(_Instrument, metrics.Histogram):
    def record(self, *args: Any, **kwargs: Any) -> None:
        self._inner.record(*args, **kwargs)


class _ObservableCounter(_Instrument, metrics.ObservableCounter):
    pass


class _ObservableUpDownCounter(_Instrument, metrics.ObservableUpDownCounter):
    pass


class _ObservableGauge(_Instrument, metrics.ObservableGauge):
    pass


_KINDS: dict[str, type[_Instrument]] = {
    "create_counter": _Counter,
    "create_up_down_counter": _UpDownCounter,
    "create_histogram": _Histogram,
    "create_observable_counter": _ObservableCounter,
    "create_observable_up_down_counter": _ObservableUpDownCounter,
    "create_observable_gauge": _ObservableGauge,
}  # any other kind (a gauge, where the API has it) is a plain _Instrument
_instruments: dict[Any, _Instrument] = {}  # made by _instrument, to make each one once


def _instrument(kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The instrument ``_meter.<kind>(*args, **kwargs)`` makes, made once per process
    (an instrument with callbacks is made each time: its callbacks tell it apart)."""
    try:
        key: Any = (kind, args, tuple(sorted(kwargs.items())))
        hash(key)
    except TypeError:
        key = None
    found = _instruments.get(key) if key is not None else None
    if found is None:
        inner = getattr(_meter, kind)(*args, **kwargs)
        found = _KINDS.get(kind, _Instrument)((kind, args, kwargs), inner)
        if key is not None:
            _instruments[key] = found
    return found


class _Meter(metrics.Meter):
    """Monarch's meter: the proxy meter of scope ``monarch``, whose
    instruments pickle (``_Instrument``)."""

    def create_counter(self, *args: Any, **kwargs: Any) -> metrics.Counter:
        made: _Counter = _instrument("create_counter", args, kwargs)
        return made

    def create_up_down_counter(self, *args: Any, **kwargs: Any) -> metrics.UpDownCounter:
        made: _UpDownCounter = _instrument("create_up_down_counter", args, kwargs)
        return made

    def create_histogram(self, *args: Any, **kwargs: Any) -> metrics.Histogram:
        made: _Histogram = _instrument("create_histogram", args, kwargs)
        return made

    def create_gauge(self, *args: Any, **kwargs: Any) -> Any:  # metrics.Gauge, where the API has it
        return _instrument("create_gauge", args, kwargs)

    def create_observable_counter(self, *args: Any, **kwargs: Any) -> metrics.ObservableCounter:
        made: _ObservableCounter = _instrument("create_observable_counter", args, kwargs)
        return made

    def create_observable_up_down_counter(
        self, *args: Any, **kwargs: Any
    ) -> metrics.ObservableUpDownCounter:
        made: _ObservableUpDownCounter = _instrument(
            "create_observable_up_down_counter", args, kwargs
        )
        return made

    def create_observable_gauge(self, *args: Any, **kwargs: Any) -> metrics.ObservableGauge:
        made: _ObservableGauge = _instrument("create_observable_gauge", args, kwargs)
        return made

    def __reduce__(self) -> tuple[Any, ...]:
        return (get_meter, ())


_monarch_meter = _Meter(SCOPE)


def get_meter() -> metrics.Meter:
    """Monarch's process-global OpenTelemetry meter.

    Instruments made from it record nothing until a meter provider is set
    in the process (by the program, or by ``ENABLE_OTEL_METRICS``); those
    made before then start recording once one is. They pickle by kind and
    name: a counter that an actor's code uses from a global of ``__main__``
    (or gets as an argument) is, in the actor's process, that process's
    counter of the same name.

    Returns:
        The meter of the instrumentation scope ``monarch``.

    Examples:
        >>> from monarch_actor import get_meter
        >>> steps = get_meter().create_counter("train.steps")
        >>> steps.add(1, {"phase": "warmup"})
    """
    return _monarch_meter
