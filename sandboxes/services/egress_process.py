"""The egress proxy as a process of the platform (`manage.py egressproxy`): the proxy of the
egress package over the database (DatabasePolicySource), with the deployment's CA and the
operator's name map from the settings, served until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import TYPE_CHECKING

from django.conf import settings

from sandboxes.services import egress_ca
from sandboxes.services.egress_source import DatabasePolicySource

if TYPE_CHECKING:
    from egress.server import EgressProxy

logger = logging.getLogger(__name__)


def egress_proxy() -> EgressProxy:
    """The proxy, not started yet (tests start it in a thread: egress.thread.ProxyThread)."""
    # Imported on use: only the proxy's process needs its server.
    from egress.resolver import Resolver
    from egress.server import EgressProxy

    return EgressProxy(
        DatabasePolicySource(),
        resolver=Resolver(settings.SANDHUB_EGRESS_HOSTS),
        ca=egress_ca.certificate_authority(),
        upstream_cafile=settings.SANDHUB_EGRESS_UPSTREAM_CA or None,
    )


def run_egress_proxy() -> None:
    """Serve on the configured address and ports until SIGTERM or SIGINT."""
    asyncio.run(_serve(egress_proxy()))


async def _serve(proxy: EgressProxy) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    bind = settings.SANDHUB_EGRESS_BIND
    await proxy.start(bind, settings.SANDHUB_EGRESS_PORT, bind, settings.SANDHUB_EGRESS_DNS_PORT)
    logger.info("egress proxy on %s: port %s, DNS %s", bind, proxy.port, proxy.dns_port)
    try:
        await stop.wait()
    finally:
        await proxy.stop()
