"""One client connection carrying HTTP/1.1 requests through the proxy (keep-alive: each
request is checked on its own), forwarded upstream with h11 on both sides."""

from __future__ import annotations

import contextlib

import h11

from egress import relay
from egress.http import (
    MAX_HEAD,
    Destination,
    Refused,
    Route,
    explicit_destination,
    fixed_length,
    keeps_alive,
    next_event,
    refusal_bytes,
    response_headers,
    send,
    transparent_destination,
    upstream_headers,
)
from egress.policy import SandboxPolicy
from egress.relay import Channel

EXPLICIT, TRANSPARENT, INTERCEPTED = "explicit", "transparent", "intercepted"


class UpstreamGone(Exception):
    """The upstream ended or broke the exchange."""


class HttpSession:
    """`mode` says where requests go: EXPLICIT (absolute-form URL), TRANSPARENT (the Host
    header; port from it or `default_port`), INTERCEPTED (`upstream`, already connected and
    checked, with `policy`)."""

    def __init__(
        self,
        route: Route,
        client: Channel,
        mode: str,
        *,
        default_port: int = 80,
        upstream: Channel | None = None,
        host: str = "",
        policy: SandboxPolicy | None = None,
    ) -> None:
        self._route = route
        self._client = client
        self._mode = mode
        self._default_port = default_port
        self._upstream = upstream
        self._upstream_key = (host, 0) if upstream else None
        self._host = host
        self._policy = policy
        self._incoming = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        self._outgoing = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        self._upstream_spent = False  # the upstream connection cannot carry another request
        self._method = b"GET"
        self._client_keeps_alive = True  # what the current request asked
        self._client_restarted = False  # _splice_body replaced the client's h11 state

    async def run(self) -> None:
        try:
            while await self._one_request():
                pass
        except h11.RemoteProtocolError as error:
            await self._answer(Refused(error.error_status_hint, "sandhub egress: bad request"))
        except (UpstreamGone, h11.LocalProtocolError):
            await self._answer(Refused(502, "sandhub egress: the upstream server failed"))
        finally:
            if self._upstream is not None:
                self._upstream.close()

    async def _one_request(self) -> bool:
        event = await next_event(self._incoming, self._client)
        if not isinstance(event, h11.Request):
            return False  # the client is done (ConnectionClosed)
        try:
            destination = self._destination(event)
            policy = self._policy or await self._route.authorize(event)
            upstream = await self._connect(policy, destination)
        except Refused as refusal:
            await self._answer(refusal)
            return False
        self._method = event.method
        self._client_keeps_alive = keeps_alive(event)
        secrets = policy.secrets_for(destination.host)
        headers = upstream_headers(event.headers.raw_items(), destination.host_header, secrets)
        await self._up(h11.Request(method=event.method, target=destination.target, headers=headers))
        if self._incoming.they_are_waiting_for_100_continue:
            go_on = h11.InformationalResponse(status_code=100, headers=[])
            await send(self._incoming, self._client, go_on)
        await self._forward_body(upstream)
        await self._forward_response(upstream)
        return self._next_cycle()

    def _destination(self, request: h11.Request) -> Destination:
        if self._mode == EXPLICIT:
            return explicit_destination(request)
        if self._mode == TRANSPARENT:
            return transparent_destination(request, self._default_port)
        return Destination(self._host, 0, request.target)

    async def _connect(self, policy: SandboxPolicy, destination: Destination) -> Channel:
        key = (destination.host, destination.port)
        if self._upstream is not None and self._upstream_key == key:
            return self._upstream
        if self._mode == INTERCEPTED:
            raise Refused(502, "sandhub egress: the upstream connection ended")
        self._drop_upstream()
        self._upstream = await self._route.connect(policy, destination.host, destination.port)
        self._upstream_key = key
        return self._upstream

    def _drop_upstream(self) -> None:
        if self._upstream is not None:
            self._upstream.close()
        self._upstream = None
        self._upstream_key = None
        self._upstream_spent = False
        self._outgoing = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)

    async def _up(self, event: h11.Event) -> None:
        assert self._upstream is not None
        try:
            await send(self._outgoing, self._upstream, event)
        except OSError as error:
            raise UpstreamGone() from error

    async def _forward_body(self, upstream: Channel) -> None:
        while True:
            event = await next_event(self._incoming, self._client)
            if isinstance(event, h11.Data):
                await self._up(h11.Data(data=event.data))
            elif isinstance(event, h11.EndOfMessage):
                await self._up(h11.EndOfMessage())
                return
            else:  # the client left mid-body: h11 raised already, or this ends it
                raise h11.RemoteProtocolError("request body cut short")

    async def _forward_response(self, upstream: Channel) -> None:
        while True:
            try:
                event = await next_event(self._outgoing, upstream)
            except (h11.RemoteProtocolError, OSError) as error:
                raise UpstreamGone() from error
            if isinstance(event, h11.InformationalResponse):
                if event.status_code != 101:
                    await send(self._incoming, self._client, event)
            elif isinstance(event, h11.Response):
                headers = response_headers(event.headers.raw_items())
                response = h11.Response(
                    status_code=event.status_code, headers=headers, reason=event.reason
                )
                await send(self._incoming, self._client, response)
                length = fixed_length(event, self._method)
                if length is not None:
                    await self._copy_body(upstream, length, keeps_alive(event))
                    return
            elif isinstance(event, h11.Data):
                await send(self._incoming, self._client, h11.Data(data=event.data))
            elif isinstance(event, h11.EndOfMessage):
                await send(self._incoming, self._client, h11.EndOfMessage())
                return
            else:
                raise UpstreamGone()

    async def _copy_body(self, upstream: Channel, length: int, keep_alive: bool) -> None:
        """A Content-Length body, read from the upstream as it comes rather than parsed by
        h11 (a copy less per chunk: what a large download costs). The upstream's h11 state
        saw the head only, so it is replaced for the next exchange."""
        pending = self._outgoing.trailing_data[0]
        if len(pending) <= length and await self._splice_body(upstream, pending, length):
            self._upstream_spent = not keep_alive
            return
        remaining = length
        extra = False
        while remaining:
            chunk = pending or await self._recv_upstream(upstream)
            pending = b""
            if len(chunk) > remaining:
                extra, chunk = True, chunk[:remaining]
            await send(self._incoming, self._client, h11.Data(data=chunk))
            remaining -= len(chunk)
        extra = extra or bool(pending)
        await send(self._incoming, self._client, h11.EndOfMessage())
        self._outgoing = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        self._upstream_spent = extra or not keep_alive

    async def _splice_body(self, upstream: Channel, pending: bytes, length: int) -> bool:
        """Between two plain sockets the kernel moves the body (splice); h11's states are
        then started afresh (both saw the heads only). False when splice cannot be used."""
        client = self._client
        if not (relay.SPLICE and type(client) is Channel and type(upstream) is Channel):
            return False
        try:
            if pending:
                await client.send(pending)
            moved = len(pending) + await relay.splice_bytes(
                upstream.sock, client.sock, length - len(pending)
            )
        except relay.SpliceUnsupported:
            if pending:
                raise UpstreamGone() from None  # cannot happen on Linux; never half-sent
            return False
        except OSError as error:
            raise UpstreamGone() from error
        if moved < length:
            raise UpstreamGone()
        self._outgoing = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        leftover = self._incoming.trailing_data[0]  # a request the client pipelined
        self._incoming = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        if leftover:  # (receive_data(b"") would mean the client closed)
            self._incoming.receive_data(leftover)
        self._client_restarted = True
        return True

    async def _recv_upstream(self, upstream: Channel) -> bytes:
        try:
            chunk = await upstream.recv()
        except OSError as error:
            raise UpstreamGone() from error
        if not chunk:
            raise UpstreamGone()
        return chunk

    def _next_cycle(self) -> bool:
        """Whether the client connection carries on (keep-alive)."""
        upstream = self._outgoing
        if self._upstream_spent:
            reusable = False
        elif upstream.our_state is h11.DONE and upstream.their_state is h11.DONE:
            upstream.start_next_cycle()
            reusable = True
        else:  # IDLE both: a fresh state after _copy_body
            reusable = upstream.our_state is h11.IDLE and upstream.their_state is h11.IDLE
        if not reusable:
            if self._mode == INTERCEPTED:
                return False  # the one upstream this connection may use is gone
            self._drop_upstream()
        if self._client_restarted:
            self._client_restarted = False
            return self._client_keeps_alive
        if self._incoming.our_state is h11.DONE and self._incoming.their_state is h11.DONE:
            self._incoming.start_next_cycle()
            return True
        return False

    async def _answer(self, refusal: Refused) -> None:
        """Refuse on an explicit connection; a transparent client just sees the close."""
        if self._mode == TRANSPARENT or self._incoming.our_state not in (
            h11.IDLE,
            h11.SEND_RESPONSE,
        ):
            return
        with contextlib.suppress(OSError, h11.LocalProtocolError):
            await self._client.send(refusal_bytes(self._incoming, refusal))
