"""Processes and host agents: proc tables, the fork server, CPU binding and
the procs' output."""
