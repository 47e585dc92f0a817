"""The DNS the platform answers for sandboxes (UDP): names a sandbox may reach resolve to the
address its transparent proxy listens on; anything else is REFUSED (and counted)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

import dns.exception
import dns.flags
import dns.message
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from egress.policy import SandboxPolicy

log = logging.getLogger(__name__)
TTL = 5  # seconds: a changed policy shows soon


class DnsServer(asyncio.DatagramProtocol):
    def __init__(
        self,
        lookup: Callable[[str], Awaitable[SandboxPolicy | None]],
        count: Callable[[str, str, str], None],
    ) -> None:
        self._lookup = lookup
        self._count = count
        self._transport: asyncio.DatagramTransport | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.DatagramTransport, transport)  # uvloop's is no subclass

    def datagram_received(self, data: bytes, addr: Any) -> None:
        task = asyncio.ensure_future(self._answer(data, addr))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _answer(self, data: bytes, addr: Any) -> None:
        try:
            query = dns.message.from_wire(data)
        except (dns.exception.DNSException, ValueError):
            return  # malformed: ignored
        if query.flags & dns.flags.QR or len(query.question) != 1:
            return
        policy = await self._lookup(str(addr[0]))
        response = answer(query, policy, self._count)
        if self._transport is not None:
            with contextlib.suppress(OSError):
                self._transport.sendto(response.to_wire(), addr)


def answer(
    query: dns.message.Message,
    policy: SandboxPolicy | None,
    count: Callable[[str, str, str], None],
) -> dns.message.Message:
    response = dns.message.make_response(query)
    response.flags |= dns.flags.RA
    question = query.question[0]
    name = question.name.to_text(omit_final_dot=True).lower()
    reachable = (
        policy is not None
        and bool(policy.dns_answer)
        and question.rdclass == dns.rdataclass.IN
        and question.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA)
        and policy.allows(name, None)
    )
    if not reachable:
        response.set_rcode(dns.rcode.REFUSED)
        if policy is not None:
            count(policy.sandbox_id, f"{name}:53", "dns")
        return response
    assert policy is not None
    if question.rdtype == dns.rdatatype.A:
        response.answer.append(
            dns.rrset.from_text(question.name, TTL, "IN", "A", policy.dns_answer)
        )
    return response  # AAAA: NOERROR without an answer (the proxy is reached over IPv4)
