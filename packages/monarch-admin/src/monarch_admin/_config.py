"""The mesh admin's settings, declared in the registry of ``monarch_config``."""

from __future__ import annotations

from monarch_config import Duration, Text, declare

__all__ = ["ADMIN_ADDR", "SAMPLE_INTERVAL"]

ADMIN_ADDR = declare(
    "mesh_admin_addr",
    Text(what="HOST:PORT"),
    "127.0.0.1:1729",
    env=("MONARCH_ADMIN_ADDR", "HYPERACTOR_MESH_ADMIN_ADDR"),
    doc="Where the mesh admin server listens. Every address, loopback too, requires "
    "the job's admin token (derived from its secret) as a bearer token.",
    owner="monarch-admin",
)
SAMPLE_INTERVAL = declare(
    "mesh_admin_sample_interval",
    Duration(),
    2.0,
    env="MONARCH_ADMIN_SAMPLE_INTERVAL",
    doc="How often the mesh admin samples the job's message counts for the "
    "activity history (the dashboard's plot).",
    owner="monarch-admin",
)
