"""Telemetry of actors on OpenTelemetry: spans and metrics (``spans``), the
SDK each process sets up when the settings ask for it (``sdk``), and the
tracer and OTLP exporter of Monarch's own spans (``recorder``, ``otlp``).
It knows nothing of meshes or supervision: only the message core's
``current()`` context and settings."""
