"""Telemetry: spans of actors (``traced``, ``span``, instrumented endpoints) in
procs and in the controller, the OTLP export that the settings set up in each
process, ``get_meter``, and the ``[actor=...]`` prefix of Python log records."""

import functools
import json
import logging
import os
import socket
import subprocess
import sys
import textwrap

import pytest
from otlp_receiver import Receiver
from telemetry_actors import (
    AsyncTalker,
    AsyncTraced,
    Talker,
    Traced,
    export_to,
    log_to_list,
    memory_tracing,
)

import monarch_config
from monarch_actor import ActorError, config, span, this_host, this_proc, traced
from monarch_actor._core.process import get_runtime

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def otlp():
    receiver = Receiver()
    yield receiver
    receiver.close()


# -- spans ------------------------------------------------------------------------------------


def test_spans_of_a_proc_actor_carry_its_identity():
    procs = this_host().spawn_procs(per_host={"gpus": 2}, bootstrap=memory_tracing)
    try:
        actors = procs.spawn("traced", Traced)
        one = actors.slice(gpus=1)
        assert one.work.call_one(3).get() == 6
        assert one.quiet.call_one().get() == 1
        with pytest.raises(ActorError, match="traced failure"):
            one.boom.call_one().get()
        spans = {s["name"]: s for s in one.spans.call_one().get()}
        assert sorted(spans) == ["boom", "double", "inner", "work"]  # quiet: instrument=False

        work, inner, double = spans["work"], spans["inner"], spans["double"]
        assert (inner["parent"], double["parent"]) == (work["id"], inner["id"])
        identity = work["attributes"]
        assert identity["monarch.actor.name"] == "traced"
        assert identity["monarch.actor.class"] == "telemetry_actors.Traced"
        assert identity["monarch.actor.rank"] == 1
        assert identity["monarch.actor.point"] == "gpus=1"
        assert identity["monarch.host"] == socket.gethostname()
        assert identity["monarch.actor.id"] == f"traced@{identity['monarch.proc']}"
        assert identity["monarch.proc"] != get_runtime().address
        assert inner["attributes"] == {**identity, "x": 3}
        assert double["attributes"] == identity
        assert spans["boom"]["status"] == "ERROR"
        assert spans["boom"]["events"] == ["exception"]
        assert actors.slice(gpus=0).spans.call_one().get() == []  # rank 0 got no call

        assert one.state.call_one().get() == {"active": True, "recording": True}
    finally:
        procs.stop().get(timeout=30)


def test_spans_of_an_async_actor_and_its_concurrent_endpoint():
    procs = this_host().spawn_procs(per_host={"gpus": 1}, bootstrap=memory_tracing)
    try:
        actor = procs.spawn("async_traced", AsyncTraced)
        assert actor.work.call_one(8).get() == 4
        assert actor.background.call_one(6).get() == 3
        spans = actor.spans.call_one().get()
        by_name: dict[str, list[dict]] = {}
        for s in spans:
            by_name.setdefault(s["name"], []).append(s)
        assert sorted(by_name) == ["background", "halve", "inner", "work"]
        (work,), (inner,), (background,) = by_name["work"], by_name["inner"], by_name["background"]
        assert inner["parent"] == work["id"]
        assert sorted(h["parent"] for h in by_name["halve"]) == sorted(
            [inner["id"], background["id"]]
        )
        for s in spans:
            assert s["attributes"]["monarch.actor.class"] == "telemetry_actors.AsyncTraced"
            assert s["attributes"]["monarch.actor.point"] == "gpus=0"
    finally:
        procs.stop().get(timeout=30)


def test_spans_are_shared_no_ops_until_a_tracer_provider_is_set(procs):
    actors = procs.spawn("untraced", Traced)
    assert list(actors.state.call().get().values()) == [{"active": False, "recording": False}] * 4
    assert list(actors.work.call(1).get().values()) == [2] * 4


def test_the_settings_set_up_otlp_export_in_each_proc(otlp):
    get_runtime()  # the controller's runtime starts outside configured(): it exports nothing
    with monarch_config.configured(otel_tracing=True):
        procs = this_host().spawn_procs(
            per_host={"gpus": 2}, bootstrap=functools.partial(export_to, otlp.url, True)
        )
    actors = procs.spawn("exported", Traced)
    assert list(actors.work.call(5).get().values()) == [10, 10]
    actors.count.call(2).get()
    procs.stop().get(timeout=30)  # each proc flushes its exporters as it stops

    def traced_and_counted() -> bool:
        ranks = {
            s["attributes"].get("monarch.actor.rank")
            for s in otlp.spans
            if s["name"] == "work" and s["resource"].get("monarch.process.role") == "proc"
        }
        pids = {p["resource"]["process.pid"] for p in otlp.points if p["name"] == "test.calls"}
        return ranks == {0, 1} and len(pids) == 2

    assert otlp.wait_for(traced_and_counted), (otlp.spans, otlp.points)
    work = next(s for s in otlp.spans if s["name"] == "work")
    assert work["scope"] == "monarch"
    assert work["resource"]["service.name"] == "monarch"
    assert work["attributes"]["monarch.actor.name"] == "exported"
    # the endpoint's span, the user's span inside it and a traced function's inside that
    # form one trace, each the parent of the next
    by_id = {s["id"]: s for s in otlp.spans}
    double = next(s for s in otlp.spans if s["name"] == "double")
    inner = by_id[double["parent"]]
    assert inner["name"] == "inner" and inner["attributes"]["x"] == 5
    assert by_id[inner["parent"]]["name"] == "work"
    assert len({s["trace_id"] for s in (double, inner, by_id[inner["parent"]])}) == 1
    counted = [p for p in otlp.points if p["name"] == "test.calls"]
    assert {p["value"] for p in counted} == {2}
    assert {p["attributes"]["who"] for p in counted} == {"traced"}


CONTROLLER_SCRIPT = """
import json, sys
sys.path.insert(0, {here!r})
from opentelemetry import trace
user_provider = None
if {own_provider!r}:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    exporter = InMemorySpanExporter()
    user_provider = TracerProvider()
    user_provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(user_provider)
from monarch_actor import this_proc, traced
from telemetry_actors import AsyncTraced, Traced

@traced
def outside() -> int:
    return 1

assert this_proc().spawn("sync", Traced).work.call_one(2).get() == 4
assert this_proc().spawn("async", AsyncTraced).work.call_one(2).get() == 1
outside()  # after the runtime started (and with it, the SDK the settings ask for)
provider = trace.get_tracer_provider()
result = {{"provider": type(provider).__module__, "kept": provider is user_provider}}
if user_provider is not None:
    result["spans"] = [
        {{"name": s.name, "actor": (s.attributes or {{}}).get("monarch.actor.name")}}
        for s in exporter.get_finished_spans()
    ]
print(json.dumps(result))
"""


def run_controller(own_provider: bool, **env: str) -> dict:
    script = CONTROLLER_SCRIPT.format(here=HERE, own_provider=own_provider)
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr
    assert "Overriding of current TracerProvider" not in done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_controller_with_its_own_tracer_provider_keeps_it():
    result = run_controller(True, ENABLE_OTEL_TRACING="1")
    assert result["kept"]
    spans = sorted((s["name"], s["actor"]) for s in result["spans"])
    assert spans == [
        ("double", "sync"),
        ("halve", "async"),
        ("inner", "async"),
        ("inner", "sync"),
        ("outside", None),  # outside any actor: no actor's attributes
        ("work", "async"),
        ("work", "sync"),
    ]


def test_the_controller_exports_its_actors_spans_when_the_setting_is_on(otlp):
    result = run_controller(
        False,
        ENABLE_OTEL_TRACING="1",
        OTEL_EXPORTER_OTLP_ENDPOINT=otlp.url,
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
    )
    assert result["provider"] == "opentelemetry.sdk.trace"

    def exported() -> bool:  # the SDK's own exit hook flushed them
        return {s["name"] for s in otlp.spans} >= {"work", "inner", "double", "halve", "outside"}

    assert otlp.wait_for(exported, timeout=10), otlp.spans
    assert {s["resource"]["monarch.process.role"] for s in otlp.spans} == {"controller"}


METER_SCRIPT = """
import pickle
from monarch_actor import Actor, endpoint, get_meter, this_host

early = get_meter().create_counter("test.early")  # before the runtime sets up the SDK


class Counting(Actor):
    @endpoint
    def count(self) -> None:  # the class travels by value: with it, the globals it uses
        early.add(1)
        late.add(2)


procs = this_host().spawn_procs(per_host={"gpus": 1})
late = get_meter().create_counter("test.late")  # after: an instrument of the SDK
assert pickle.loads(pickle.dumps(late)) is late  # in one process, the same instrument
assert repr(late) == "<monarch counter 'test.late'>", repr(late)
from opentelemetry import metrics
assert isinstance(early, metrics.Counter) and isinstance(late, metrics.Counter)
procs.spawn("counting", Counting).count.call_one().get()
procs.stop().get()
"""


def test_instruments_used_by_an_actor_of_main_travel_to_its_proc_by_name(otlp):
    done = subprocess.run(
        [sys.executable, "-c", METER_SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "ENABLE_OTEL_METRICS": "1",
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        },
    )
    assert done.returncode == 0, done.stderr

    def counted() -> dict:
        return {
            p["name"]: p["value"]
            for p in otlp.points
            if p["resource"].get("monarch.process.role") == "proc"
        }

    assert otlp.wait_for(lambda: counted() == {"test.early": 1, "test.late": 2}), otlp.points


def test_an_actor_with_an_unset_setting_has_no_sdk():
    result = run_controller(False)
    assert result["provider"] == "opentelemetry.trace"
    assert not result["kept"]


def test_a_setting_on_without_the_sdk_says_what_to_install():
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {HERE!r})
        sys.modules["opentelemetry.sdk"] = None  # as if opentelemetry-sdk were not installed
        from monarch_actor import this_proc
        from telemetry_actors import Traced
        assert this_proc().spawn("sync", Traced).work.call_one(2).get() == 4
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "ENABLE_OTEL_TRACING": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert "ENABLE_OTEL_TRACING is on in controller" in done.stderr
    assert "opentelemetry-sdk is not installed: pip install 'monarch-actor[otel]'" in done.stderr


def test_bad_opentelemetry_variables_cost_a_warning_not_the_processes():
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {HERE!r})
        from monarch_actor import this_host
        from telemetry_actors import Traced
        procs = this_host().spawn_procs(per_host={{"gpus": 1}})
        assert procs.spawn("sync", Traced).work.call_one(2).get() == 4
        procs.stop().get(timeout=60)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "ENABLE_OTEL_TRACING": "1",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            # the SDK refuses a batch larger than its queue
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "4096",
            "OTEL_BSP_MAX_QUEUE_SIZE": "16",
        },
    )
    assert done.returncode == 0, done.stderr
    assert "ENABLE_OTEL_TRACING is on in controller" in done.stderr
    assert "ENABLE_OTEL_TRACING is on in proc" in done.stderr
    assert "could not be set up: ValueError: max_export_batch_size" in done.stderr


def test_bad_span_names_and_targets_are_refused():
    with pytest.raises(TypeError, match="name="):
        traced("load")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="str"):
        span(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty"):
        span("")
    with pytest.raises(TypeError, match="with span"):

        @traced
        def numbers():
            yield 1


# -- the log prefix ---------------------------------------------------------------------------


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def talk_log():
    """Handlers on the ``talk`` logger and on ``talk.info`` (each sees every record once)."""
    parent, child = logging.getLogger("talk"), logging.getLogger("talk.info")
    outer, inner = Lines(), Lines()
    parent.addHandler(outer)
    child.addHandler(inner)
    child.setLevel(logging.INFO)
    yield outer, inner
    parent.removeHandler(outer)
    child.removeHandler(inner)
    child.setLevel(logging.NOTSET)


def test_records_of_controller_actors_get_the_actor_prefix(talk_log):
    outer, inner = talk_log
    talker = this_proc().spawn("talker", Talker)
    async_talker = this_proc().spawn("async_talker", AsyncTalker)
    talker.info.call_one("sync hello").get()
    async_talker.info.call_one("async hello").get()
    logging.getLogger("talk.info").info("outside hello")
    expected = [
        "[actor=<root>.<telemetry_actors.Talker talker{}>] sync hello",
        "[actor=<root>.<telemetry_actors.AsyncTalker async_talker{}>] async hello",
        "outside hello",
    ]
    assert outer.lines == expected
    assert inner.lines == expected  # one prefix, however many handlers see the record


def test_the_switch_is_read_when_a_record_is_emitted(talk_log):
    outer, _ = talk_log
    talker = this_proc().spawn("switched", Talker)
    config.prefix_python_logs_with_actor = False
    try:
        talker.info.call_one("plain").get()
    finally:
        config.prefix_python_logs_with_actor = True
    talker.info.call_one("prefixed").get()
    assert outer.lines == ["plain", "[actor=<root>.<telemetry_actors.Talker switched{}>] prefixed"]


def test_the_prefix_survives_filters_and_record_factories_that_change_the_message(talk_log):
    outer, _ = talk_log
    child = logging.getLogger("talk.info")
    talker = this_proc().spawn("rewritten", Talker)
    old_factory = logging.getLogRecordFactory()

    def factory(*args, **kwargs):
        record = old_factory(*args, **kwargs)
        record.msg = f"<{record.msg}>"
        return record

    class Shout(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            record.msg = str(record.msg).upper()
            return True

    shout = Shout()
    logging.setLogRecordFactory(factory)
    child.addFilter(shout)
    try:
        talker.info.call_one("hello").get()
    finally:
        child.removeFilter(shout)
        logging.setLogRecordFactory(old_factory)
    assert outer.lines == ["[actor=<root>.<telemetry_actors.Talker rewritten{}>] <HELLO>"]


def test_records_in_a_proc_get_the_prefix_on_a_handler_made_before_the_runtime():
    procs = this_host().spawn_procs(per_host={"gpus": 2}, bootstrap=log_to_list)
    try:
        one = procs.spawn("talk", Talker).slice(gpus=1)
        one.info.call_one("first").get()
        one.set_prefixing.call_one(False).get()
        one.info.call_one("second").get()
        lines = [line for line in one.lines.call_one().get() if "talk.info" in line]
    finally:
        procs.stop().get(timeout=30)
    assert lines == [
        "INFO talk.info: [actor=<root>.<telemetry_actors.Talker talk{'gpus': 1/2}>] first",
        "INFO talk.info: second",
    ]


OUTPUT_SCRIPT = """
import asyncio, logging, sys, threading
sys.path.insert(0, {here!r})
from monarch_actor import this_host, this_proc
from telemetry_actors import Talker

forwarded = threading.Event()

class Watch:
    # the controller's stderr, noting when the proc's forwarded line arrives
    def __init__(self, inner):
        self.inner = inner
    def write(self, text):
        if "from the proc" in text:
            forwarded.set()
        return self.inner.write(text)
    def flush(self):
        self.inner.flush()

sys.stderr = Watch(sys.stderr)
procs = this_host().spawn_procs(per_host={{"gpus": 2}})
asyncio.run(procs.logging_option(stream_to_client=True, aggregate_window_sec=None))
procs.spawn("talk", Talker).slice(gpus=1).warn.call_one("from the proc").get()
assert forwarded.wait(60), "the proc's line never arrived"
this_proc().spawn("local", Talker).warn.call_one("from the controller").get()
logging.getLogger("main").warning("from the script")
procs.stop().get()
"""


def test_the_prefix_is_in_a_procs_forwarded_output_and_the_controllers():
    done = subprocess.run(
        [sys.executable, "-c", OUTPUT_SCRIPT.format(here=HERE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    # no handler anywhere: Python's last-resort handler writes the records to stderr
    assert any(
        line.endswith(
            "] [1] [actor=<root>.<telemetry_actors.Talker talk{'gpus': 1/2}>] from the proc"
        )
        for line in lines
    ), done.stderr
    assert "[actor=<root>.<telemetry_actors.Talker local{}>] from the controller" in lines
    assert "from the script" in lines


def test_actor_logger_is_named_after_the_class_at_debug():
    logger = Talker().logger
    assert logger.name == "Talker"
    assert logger.level == logging.DEBUG
