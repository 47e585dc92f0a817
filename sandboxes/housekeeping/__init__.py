"""Housekeeping that keeps hosts and the database in agreement: auto-cleanup (sweep.py),
host probes (probes.py), reconciliation (reconcile.py) and the warm pool (pool.py).

The django-q2 schedules (sandboxes/tasks.py) run it through the service entry points in
sandboxes/services/hosts.py, as the system; create_sandbox claims warm-pool members through
pool.provision_sandbox. Nothing else calls it.

Everything here decides from database rows and what hosts answer now, never from timers kept
in a process, so a restart of any web or worker process cannot leave a sandbox alive forever:
the next run finds the same rows. Tunables come from Django settings (read from the
environment in platform_site/settings.py) through config.py.
"""
