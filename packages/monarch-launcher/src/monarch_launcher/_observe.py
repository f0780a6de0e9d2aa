"""What a job starts to be looked at: the mesh admin server and the
dashboard (from ``monarch-admin``, found through the ``admin`` and
``dashboard`` extension hooks, so this package never imports it)."""

from __future__ import annotations

from dataclasses import dataclass

from monarch_actor.extension import extension

__all__ = ["MeshAdminConfig", "TelemetryConfig", "start_observers"]


@dataclass
class MeshAdminConfig:
    """Where ``JobTrait.enable_admin`` starts the mesh admin server.

    Attributes:
        admin_addr: ``HOST:PORT`` to listen on; ``None`` for the
            ``mesh_admin_addr`` setting (``127.0.0.1:1729``).
    """

    admin_addr: str | None = None


@dataclass
class TelemetryConfig:
    """What ``JobTrait.enable_telemetry`` starts when the job's state is made:
    the mesh admin server and, with ``include_dashboard``, the dashboard.

    Attributes:
        retention_secs: accepted for compatibility with Monarch (its trace
            store); the admin keeps an hour of activity samples.
        include_dashboard: whether to serve the web dashboard.
        dashboard_port: the dashboard's port (0: any free one).
        snapshot_interval_secs: accepted for compatibility with Monarch; the
            admin samples the job every ``mesh_admin_sample_interval``.
    """

    retention_secs: int = 3600
    include_dashboard: bool = False
    dashboard_port: int = 8265
    snapshot_interval_secs: float = 30.0


def start_observers(admin: MeshAdminConfig | None, telemetry: TelemetryConfig | None) -> None:
    """Start what ``enable_admin``/``enable_telemetry`` asked for (once per process).

    Args:
        admin: the admin server's settings, or ``None`` for none.
        telemetry: the telemetry settings, or ``None``.

    Raises:
        RuntimeError: ``monarch-admin`` is not installed (the message says so).
    """
    if telemetry is not None and telemetry.include_dashboard:
        hook = extension("dashboard")
        assert hook is not None
        hook(telemetry.dashboard_port)
    if admin is not None:
        hook = extension("admin")
        assert hook is not None
        hook(admin.admin_addr)
