"""`manage.py egressproxy`: the egress proxy (issue 27), the one way out of a sandbox whose
network is on, until SIGTERM. Its settings: SANDHUB_EGRESS_PORT, SANDHUB_EGRESS_DNS_PORT,
SANDHUB_EGRESS_BIND, SANDHUB_EGRESS_HOSTS, SANDHUB_EGRESS_UPSTREAM_CA."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from sandboxes import services


class Command(BaseCommand):
    help = "Run the egress proxy (HTTP proxy, transparent HTTP/HTTPS and DNS) until SIGTERM."

    def handle(self, *args: Any, **options: Any) -> None:
        services.run_egress_proxy()
