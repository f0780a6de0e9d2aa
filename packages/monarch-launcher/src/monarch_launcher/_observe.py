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


def start_observers(
    admin: MeshAdminConfig | None, telemetry: TelemetryConfig | None
) -> tuple[str | None, str | None]:
    """Start what ``enable_admin``/``enable_telemetry`` asked for (once per process).

    The dashboard is served by the mesh admin server: one server, at the
    address asked for. ``admin_addr``, when given, is where it listens (and
    the dashboard with it); otherwise, with the dashboard on, it listens on
    the dashboard's port. It prints ``Mesh admin server listening on URL``
    and, with the dashboard, ``Monarch Dashboard: URL``: the same URL.

    Args:
        admin: the admin server's settings, or ``None`` for none.
        telemetry: the telemetry settings, or ``None``.

    Returns:
        The admin server's URL and the dashboard's (each with the token in its
        fragment, ``http://HOST:PORT/#token=...``), ``None`` for what was not
        asked for.

    Raises:
        RuntimeError: ``monarch-admin`` is not installed (the message says so).
    """
    dashboard = telemetry is not None and telemetry.include_dashboard
    admin_url = dashboard_url = None
    if admin is not None:
        addr = admin.admin_addr
        if addr is None and telemetry is not None and dashboard:
            addr = f"127.0.0.1:{telemetry.dashboard_port}"
        hook = extension("admin")
        assert hook is not None
        admin_url = _url(hook(addr))
    if telemetry is not None and dashboard:
        hook = extension("dashboard")
        assert hook is not None
        # an admin server already running serves the dashboard: it says so, same URL
        dashboard_url = _url(hook(telemetry.dashboard_port))
    return admin_url, dashboard_url


def _url(server: object) -> str | None:
    """What a server the hooks started says to open (its ``dashboard_url``)."""
    url = getattr(server, "dashboard_url", None)
    return url if isinstance(url, str) else None
