"""Loaded at start by every Python process of a ``telemetry_bench.py`` run in
its "bare" mode (this folder is put on ``PYTHONPATH``): it takes out what
observability adds to each message even with telemetry off (each actor's
counters and flight recorder, and the span check around instrumented
endpoints), so that the run measures the runtime without it."""

import monarch_actor._api.actor as actor
from monarch_actor._api.actor_stats import ActorStats

actor.instrumented = lambda method: method  # endpoints are defined after this: no wrapper
ActorStats.begin = lambda self, endpoint: 0.0  # type: ignore[method-assign]
ActorStats.end = lambda self, endpoint, started, failed: None  # type: ignore[method-assign]
