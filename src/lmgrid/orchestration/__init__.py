"""Driving the workflow: the config and its overrides, the warm training server, plan, status, ETA, dry-run reading and scales."""
