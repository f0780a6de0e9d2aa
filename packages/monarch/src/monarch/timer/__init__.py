"""``monarch.timer``: timing sections of work where it runs, on the GPU or the
CPU (``monarch_tensor.timer``). Remote functions name the functions of
``monarch.timer.execution_timer`` (or ``remote_execution_timer``) to time
work on every process of a mesh."""

from monarch_tensor.timer import (
    ExecutionTimer,
    execution_timer_start,
    execution_timer_stop,
    get_execution_timer_average_ms,
    get_latest_timer_measurement,
)

from . import execution_timer, remote_execution_timer

__all__ = [
    "ExecutionTimer",
    "execution_timer",
    "execution_timer_start",
    "execution_timer_stop",
    "get_execution_timer_average_ms",
    "get_latest_timer_measurement",
    "remote_execution_timer",
]
