"""``monarch.timer.execution_timer``: ``ExecutionTimer`` and the functions
remote functions name to time work on the processes (``monarch_tensor.timer``)."""

from monarch_tensor.timer import (
    ExecutionTimer,
    execution_timer_start,
    execution_timer_stop,
    get_execution_timer_average_ms,
    get_execution_timer_summary,
    get_latest_timer_measurement,
    get_time_perfcounter,
)

__all__ = [
    "ExecutionTimer",
    "execution_timer_start",
    "execution_timer_stop",
    "get_execution_timer_average_ms",
    "get_execution_timer_summary",
    "get_latest_timer_measurement",
    "get_time_perfcounter",
]
