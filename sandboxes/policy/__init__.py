"""The rules services and housekeeping apply: who may reach which sandbox (access), where a
new sandbox goes (placement), default limits, quotas by state (running, paused, stopped:
quotas), and input checks (validation)."""
