"""The proxy on an event loop of its own in a daemon thread (tests, the bench, a process
that has other things to do)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future

from egress.server import EgressProxy


def new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop  # faster socket I/O when installed (it comes with uvicorn)
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class ProxyThread:
    def __init__(
        self,
        proxy: EgressProxy,
        host: str = "0.0.0.0",
        port: int = 0,
        dns_host: str = "0.0.0.0",
        dns_port: int = 0,
    ) -> None:
        self.proxy = proxy
        self._where = (host, port, dns_host, dns_port)
        self._loop = new_loop()
        self._thread = threading.Thread(target=self._run, name="egress-proxy", daemon=True)
        self._started: Future[None] = Future()

    @property
    def port(self) -> int:
        return self.proxy.port

    @property
    def dns_port(self) -> int:
        return self.proxy.dns_port

    def start(self) -> ProxyThread:
        """Returns once the proxy listens (its ports known); raises what start raised."""
        self._thread.start()
        self._started.result()
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self.proxy.stop(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()

    def report_now(self) -> None:
        """Hand the refusals counted so far to the source now, not at the next period."""
        asyncio.run_coroutine_threadsafe(self.proxy.report(), self._loop).result()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self.proxy.start(*self._where))
        except BaseException as error:
            self._started.set_exception(error)
            self._loop.close()
            return
        self._started.set_result(None)
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()
