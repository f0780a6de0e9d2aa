"""Monarch's own span export (``ENABLE_OTEL_TRACING``): the OTLP encoding,
checked against OpenTelemetry's protobuf classes; the recorder's spans on
OpenTelemetry's API, nested with the SDK's; sampling; delivery over HTTP and
gRPC to real collectors, with their failures."""

from __future__ import annotations

import logging
import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk.trace import RandomIdGenerator, TracerProvider, sampling
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from otlp_receiver import GrpcReceiver, Receiver, spans_of

from monarch_actor._telemetry import otlp
from monarch_actor._telemetry.recorder import RecordedSpan, SharedAttributes, SpanRecorder

RESOURCE = {"service.name": "monarch", "process.pid": 7}


@pytest.fixture
def collector():
    receiver = Receiver()
    yield receiver
    receiver.close()


def recorder_to(url: str, protocol: str = "http/protobuf", sampler=None, **options) -> SpanRecorder:
    settings = otlp.OtlpSettings.from_environment(protocol)._replace(
        endpoint=f"{url}/v1/traces" if protocol == "http/protobuf" else url, timeout=5.0
    )
    return SpanRecorder(
        sampler, RandomIdGenerator(), RESOURCE, otlp.sender(settings), delay=3600, **options
    )


# -- the encoding -----------------------------------------------------------------------

scalars = (
    st.text(max_size=20)
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
)
attribute_values = (
    scalars
    | st.lists(st.text(max_size=5), max_size=3)
    | st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=3)
)
attribute_maps = st.dictionaries(st.text(min_size=1, max_size=12), attribute_values, max_size=6)


class Record:
    def __init__(self, **fields) -> None:
        self.__dict__.update(fields)


@settings(max_examples=200, deadline=None)
@given(
    name=st.text(max_size=30),
    kind=st.integers(min_value=1, max_value=5),
    trace_id=st.integers(min_value=1, max_value=2**128 - 1),
    span_id=st.integers(min_value=1, max_value=2**64 - 1),
    parent_id=st.none() | st.integers(min_value=1, max_value=2**64 - 1),
    times=st.tuples(st.integers(0, 2**63), st.integers(0, 2**63)),
    span_attributes=attribute_maps,
    event=st.none() | st.tuples(st.text(max_size=10), attribute_maps),
    status=st.none() | st.tuples(st.integers(1, 2), st.text(max_size=10)),
)
def test_a_span_decodes_as_opentelemetry_reads_it(
    name, kind, trace_id, span_id, parent_id, times, span_attributes, event, status
):
    extras = [otlp.encode_event(event[0], 5, event[1])] if event else None
    record = Record(
        name=name,
        kind=kind,
        trace_id=trace_id,
        span_id=span_id,
        parent_id=parent_id,
        parent_remote=False,
        start_time=times[0],
        end_time=times[1],
        attributes=span_attributes,
        extras=extras,
        status=status,
    )
    body = otlp.encode_request(RESOURCE, "monarch", [otlp.encode_span(record)], "1.0")
    (decoded,) = spans_of(body)
    assert decoded["resource"] == RESOURCE and decoded["scope"] == "monarch"
    assert (decoded["name"], decoded["kind"]) == (name, kind)
    assert (decoded["trace_id"], decoded["id"], decoded["parent"]) == (trace_id, span_id, parent_id)
    assert (decoded["start"], decoded["end"]) == times
    assert decoded["flags"] == 0x100  # the parent's remoteness is known: it is local
    assert decoded["attributes"] == span_attributes
    if event:
        assert decoded["events"] == [{"name": event[0], "time": 5, **event[1]}]
    expected_status = (status[0], status[1] if status[1] else "") if status else (0, "")
    assert decoded["status"] == expected_status


def test_spans_of_one_actor_share_one_encoding_of_its_attributes():
    shared = SharedAttributes({"monarch.actor.name": "a"})
    first = Record(
        name="ep",
        kind=1,
        trace_id=1,
        span_id=2,
        parent_id=None,
        parent_remote=False,
        start_time=1,
        end_time=2,
        attributes=shared,
        extras=None,
        status=None,
    )
    otlp.encode_span(first)
    shared_key = ("ep", 1, id(shared))
    assert otlp._shared[shared_key].attributes is shared
    kept = len(otlp._shared)
    own = Record(**{**first.__dict__, "attributes": {"other": 1}})  # one span's own
    (decoded,) = spans_of(otlp.encode_request({}, "s", [otlp.encode_span(own)]))
    assert decoded["attributes"] == {"other": 1}
    assert len(otlp._shared) == kept  # nothing kept for it


# -- spans on the API -------------------------------------------------------------------


def test_spans_nest_with_the_sdks_either_way(collector):
    recorder = recorder_to(collector.url)
    sdk_spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(sdk_spans))
    sdk = provider.get_tracer("user")

    with recorder.start_as_current_span("outer") as outer:
        assert isinstance(outer, RecordedSpan) and outer.is_recording()
        with sdk.start_as_current_span("theirs") as theirs:
            with recorder.start_as_current_span("ours", kind=SpanKind.SERVER) as ours:
                ours.set_attribute("step", 3)
    assert recorder.flush()
    (theirs_done,) = sdk_spans.get_finished_spans()
    by_name = {s["name"]: s for s in collector.spans}
    assert theirs_done.parent.span_id == by_name["outer"]["id"]
    assert by_name["ours"]["parent"] == theirs.get_span_context().span_id
    assert {s["trace_id"] for s in by_name.values()} == {theirs_done.context.trace_id}
    assert by_name["ours"]["kind"] == SpanKind.SERVER.value + 1
    assert by_name["ours"]["attributes"] == {"step": 3}
    assert by_name["outer"]["parent"] is None
    assert by_name["outer"]["start"] <= by_name["ours"]["start"] <= by_name["ours"]["end"]
    assert not outer.is_recording()


def test_what_a_span_records(collector):
    recorder = recorder_to(collector.url)
    shared = SharedAttributes({"monarch.actor.name": "trainer"})
    linked = trace.SpanContext(5, 6, is_remote=True)
    span = recorder.start_span("step", attributes=shared, links=[Link(linked, {"why": "batch"})])
    span.set_attribute("loss", 0.5)
    span.set_attribute("bad", object())  # not an attribute value: dropped
    span.set_attributes({"tags": ["a", "b"]})
    span.add_event("checkpoint", {"bytes": 10})
    try:
        raise ValueError("diverged")
    except ValueError as error:
        span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, "diverged"))
    span.update_name("train_step")
    span.end()
    span.set_attribute("late", 1)  # after its end: ignored
    span.end()  # twice: once is recorded
    assert dict(shared) == {"monarch.actor.name": "trainer"}  # the shared dict is unchanged
    assert recorder.flush()

    (done,) = collector.spans
    assert done["name"] == "train_step"
    assert done["attributes"] == {"monarch.actor.name": "trainer", "loss": 0.5, "tags": ["a", "b"]}
    assert [e["name"] for e in done["events"]] == ["checkpoint", "exception"]
    assert done["events"][0]["bytes"] == 10
    exception = done["events"][1]
    assert exception["exception.type"] == "ValueError"
    assert exception["exception.message"] == "diverged"
    assert "raise ValueError" in exception["exception.stacktrace"]
    assert done["links"] == [(5, 6)]
    assert done["status"] == (2, "diverged")


def test_an_ok_status_is_final_and_unset_changes_nothing(collector):
    recorder = recorder_to(collector.url)
    span = recorder.start_span("s")
    span.set_status(StatusCode.UNSET)
    span.set_status(StatusCode.OK, "ignored: only errors carry a message")
    span.set_status(StatusCode.ERROR, "too late")
    span.end()
    assert recorder.flush()
    assert collector.spans[0]["status"] == (1, "")


@pytest.mark.parametrize(
    ("sampler", "kept"),
    [(sampling.ALWAYS_OFF, 0), (sampling.TraceIdRatioBased(0.0), 0), (sampling.ALWAYS_ON, 2)],
)
def test_the_providers_sampler_decides(collector, sampler, kept):
    recorder = recorder_to(collector.url, sampler=sampler)
    with recorder.start_as_current_span("root") as root:
        assert isinstance(root, RecordedSpan) == bool(kept)
        recorder.start_span("child").end()
    assert recorder.flush()
    assert len(collector.spans) == kept


def test_a_parent_that_was_not_sampled_drops_its_children(collector):
    recorder = recorder_to(collector.url)  # the default: a parent's decision stands
    unsampled = trace.NonRecordingSpan(trace.SpanContext(1, 2, False, trace.TraceFlags(0)))
    with trace.use_span(unsampled):
        child = recorder.start_span("child")
    assert not child.is_recording()
    assert child.get_span_context().trace_id == 1
    child.end()
    assert recorder.flush()
    assert collector.spans == []


def test_a_full_queue_drops_spans_and_says_so(collector, caplog):
    recorder = recorder_to(collector.url, batch=2, queue=4)
    recorder._wake.set = lambda: None  # type: ignore[method-assign]  # keep the thread asleep
    for i in range(10):
        recorder.start_span(f"s{i}").end()
    with caplog.at_level(logging.WARNING, "monarch.actor.telemetry"):
        assert recorder.flush()
    assert [s["name"] for s in collector.spans] == ["s0", "s1", "s2", "s3"]
    assert len(collector.requests) == 2  # batches of two
    assert "6 spans were dropped" in caplog.text
    assert "OTEL_BSP_MAX_QUEUE_SIZE" in caplog.text


def test_the_thread_exports_a_full_batch_without_a_flush(collector):
    recorder = recorder_to(collector.url, batch=3)
    for i in range(3):
        recorder.start_span(f"s{i}").end()
    assert collector.wait_for(lambda: len(collector.spans) == 3, timeout=10)
    recorder.shutdown()


# -- delivery ---------------------------------------------------------------------------


def test_a_collector_that_is_busy_gets_the_spans_again(collector):
    collector.answers = [503, 429]
    recorder = recorder_to(collector.url)
    recorder.start_span("s").end()
    assert recorder.flush()
    assert [s["name"] for s in collector.spans] == ["s"]
    assert len(collector.requests) == 3


def test_a_flush_keeps_to_its_timeout_while_the_collector_stays_busy(collector):
    collector.answers = [503] * 100
    settings = otlp.OtlpSettings.from_environment("http/protobuf")._replace(
        endpoint=f"{collector.url}/v1/traces", timeout=60.0
    )
    recorder = SpanRecorder(None, RandomIdGenerator(), RESOURCE, otlp.sender(settings), delay=3600)
    recorder.start_span("s").end()
    started = time.monotonic()
    assert not recorder.flush(timeout=1.0)  # a stopping proc's flush: its time, not the sender's
    assert time.monotonic() - started < 5
    assert collector.spans == []


def test_a_refused_export_is_logged_and_not_retried(collector, caplog):
    collector.answers = [400]
    recorder = recorder_to(collector.url)
    recorder.start_span("s").end()
    with caplog.at_level(logging.WARNING, "monarch.actor.telemetry"):
        assert not recorder.flush()
    assert len(collector.requests) == 1
    assert f"exporting spans to {collector.url}/v1/traces failed: HTTP 400" in caplog.text


def test_a_collector_nobody_runs_costs_a_warning(caplog):
    recorder = recorder_to("http://127.0.0.1:9")  # the discard port: nothing listens
    recorder._send = otlp.sender(
        otlp.OtlpSettings.from_environment("http/protobuf")._replace(
            endpoint="http://127.0.0.1:9/v1/traces", timeout=0.5
        )
    )
    recorder.start_span("s").end()
    with caplog.at_level(logging.WARNING, "monarch.actor.telemetry"):
        assert not recorder.flush()
    assert "exporting spans to http://127.0.0.1:9/v1/traces failed" in caplog.text


def test_the_standard_variables_set_headers_compression_and_endpoint(collector, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://unused:1")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{collector.url}/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-team=ml%20infra, api-key = secret")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip")
    settings = otlp.OtlpSettings.from_environment("http/protobuf")
    assert settings.endpoint == f"{collector.url}/v1/traces"
    assert settings.headers == {"x-team": "ml infra", "api-key": "secret"}
    recorder = SpanRecorder(None, RandomIdGenerator(), RESOURCE, otlp.sender(settings), delay=3600)
    recorder.start_span("s").end()
    assert recorder.flush()
    (request,) = collector.requests
    assert request["content-encoding"] == "gzip"
    assert request["x-team"] == "ml infra"
    assert [s["name"] for s in collector.spans] == ["s"]


def test_the_endpoint_of_all_signals_gets_the_traces_path(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    assert otlp.OtlpSettings.from_environment("http/protobuf").endpoint == (
        "http://collector:4318/v1/traces"
    )
    assert otlp.OtlpSettings.from_environment("grpc").endpoint == "http://collector:4318/"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "soon")
    assert otlp.OtlpSettings.from_environment("grpc").timeout == 10.0


def test_spans_go_over_grpc():
    receiver = GrpcReceiver()
    try:
        settings = otlp.OtlpSettings.from_environment("grpc")._replace(
            endpoint=receiver.url, headers={"x-team": "ml"}, timeout=5.0
        )
        recorder = SpanRecorder(
            None, RandomIdGenerator(), RESOURCE, otlp.sender(settings), delay=3600
        )
        with recorder.start_as_current_span("outer"):
            recorder.start_span("inner").end()
        assert recorder.flush()
        assert sorted(s["name"] for s in receiver.spans) == ["inner", "outer"]
        assert receiver.metadata[0]["x-team"] == "ml"
    finally:
        receiver.close()


def test_a_grpc_collector_nobody_runs_costs_a_warning(caplog):
    settings = otlp.OtlpSettings.from_environment("grpc")._replace(
        endpoint="http://127.0.0.1:9", timeout=0.5
    )
    recorder = SpanRecorder(None, RandomIdGenerator(), RESOURCE, otlp.sender(settings), delay=3600)
    recorder.start_span("s").end()
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, "monarch.actor.telemetry"):
        assert not recorder.flush()
    assert time.monotonic() - started < 5
    assert "exporting spans to 127.0.0.1:9 failed: UNAVAILABLE" in caplog.text


def test_floats_that_are_not_finite_travel_too(collector):
    recorder = recorder_to(collector.url)
    span = recorder.start_span("s", attributes={"inf": math.inf})
    span.end()
    assert recorder.flush()
    assert collector.spans[0]["attributes"] == {"inf": math.inf}


def test_an_endpoint_that_is_no_url_is_refused_with_the_variables_to_fix():
    settings = otlp.OtlpSettings.from_environment("http/protobuf")._replace(
        endpoint="collector:4318/v1/traces"
    )
    with pytest.raises(ValueError, match=r"no http:// or https:// URL.*OTEL_EXPORTER_OTLP"):
        otlp.sender(settings)
