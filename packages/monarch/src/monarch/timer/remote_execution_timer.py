"""``monarch.timer.remote_execution_timer``: the path Monarch's timer example
names in ``remote("monarch.timer.remote_execution_timer.<function>")``; the
same functions as ``monarch.timer.execution_timer``, run on each process."""

from .execution_timer import (
    execution_timer_start,
    execution_timer_stop,
    get_execution_timer_average_ms,
    get_execution_timer_summary,
    get_latest_timer_measurement,
    get_time_perfcounter,
)

__all__ = [
    "execution_timer_start",
    "execution_timer_stop",
    "get_execution_timer_average_ms",
    "get_execution_timer_summary",
    "get_latest_timer_measurement",
    "get_time_perfcounter",
]
