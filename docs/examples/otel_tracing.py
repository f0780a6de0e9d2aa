"""Telemetry to an OpenTelemetry collector: spans from the script and from
actors in other processes, and a counter. Nothing in the code names the
collector: the standard OTEL_* variables do.

    ENABLE_OTEL_TRACING=1 ENABLE_OTEL_METRICS=1 \
    OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 \
    OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf \
    OTEL_SERVICE_NAME=gallery-training python otel_tracing.py
"""

from monarch.actor import Actor, endpoint, get_meter, span, this_host, traced

STEPS = 3
steps_done = get_meter().create_counter("gallery.train_steps", description="steps trained")


@traced  # a span named "load_batch" for each call, a child of the span it runs in
def load_batch(step: int) -> list[float]:
    return [float(step + i) for i in range(4)]


class Trainer(Actor):
    @endpoint  # each call of an endpoint is a span named after it: "train_step"
    def train_step(self, step: int) -> float:
        batch = load_batch(step)
        with span("forward", {"gallery.step": step}):  # a span of your own, with attributes
            loss = sum(batch) / len(batch)
        steps_done.add(1, {"gallery.role": "trainer"})
        return loss


procs = this_host().spawn_procs(per_host={"gpus": 2})
trainers = procs.spawn("trainers", Trainer)
with span("training run", {"gallery.steps": STEPS}):  # a span in the script itself
    for step in range(STEPS):
        losses = trainers.train_step.call(step).get()
        print(f"step {step}: loss {losses.item(gpus=0)}")
procs.stop().get()  # each process sends what it still holds as it stops
print("otel tracing: ok")
