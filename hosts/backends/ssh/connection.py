"""One authenticated SSH connection to a host, shared by many threads.

    target = SshTarget("10.0.0.5", 22, "sandhub", private_key=pem, fingerprint="SHA256:...")
    conn = SshConnection(target)            # connects, checks the pinned key, logs in
    result = conn.run("nvidia-smi -L", timeout=10)
    channel = conn.open_channel()           # for a caller that streams (the agent)
    channel.exec_command("python3 -u -c ...")

Every session (command, agent) is a channel multiplexed on the one TCP connection; paramiko
allows any thread to open and use channels concurrently. The host key is checked against
the pin before anything secret is sent; see hostkeys.py.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import paramiko

from hosts.backends.ssh.commands import RunResult, execute
from hosts.backends.ssh.errors import (
    AuthenticationFailed,
    SshConnectionLost,
    SshError,
    SshTimeout,
)
from hosts.backends.ssh.handshake import describe, start_transport
from hosts.backends.ssh.hostkeys import HostKey, check_host_key, fingerprint
from hosts.backends.ssh.keys import load_private_key
from hosts.backends.ssh.ordering import order_sends
from hosts.backends.ssh.watchdog import watchdog

__all__ = ["RunResult", "SshConnection", "SshTarget"]

DEFAULT_MAX_OUTPUT = 1024 * 1024
# sshd refuses sessions beyond MaxSessions (10 by default) on one connection: opening a
# channel then waits for one to close, retrying at this pace, until its timeout.
_RETRY_BUSY = (0.005, 0.1)  # first and largest pause between attempts, seconds
# OpenSSH answers a session beyond MaxSessions with SSH_OPEN_CONNECT_FAILED ("open failed");
# ADMINISTRATIVELY_PROHIBITED is what other servers use for the same.
_OPEN_FAILED_BUSY = (1, 2)


@dataclass(frozen=True)
class SshTarget:
    """Where and how to log in. Plain data: the backend builds it from a Host and Credential.

    Secrets are left out of repr(). Equal targets share one pooled connection; a changed
    secret or pin is another target (another connection).
    """

    address: str
    port: int
    username: str
    password: str | None = field(default=None, repr=False)
    private_key: str | None = field(default=None, repr=False)  # OpenSSH or PEM text
    passphrase: str | None = field(default=None, repr=False)
    fingerprint: str | None = None  # the confirmed host key, "SHA256:..."; None: not yet
    # The confirmed key's type ("ssh-ed25519", "ssh-rsa", ...): the server is asked for that
    # key, so adding another key type to the server later does not look like a changed key.
    host_key_type: str | None = None

    @property
    def where(self) -> str:
        return describe(self.address, self.port)


class SshConnection:
    """A live, authenticated connection; raises SshError subclasses (see errors.py).

    Constructing it connects: TCP (with TCP_NODELAY), key exchange, host key check against
    `target.fingerprint` (HostKeyNotPinned / HostKeyChanged before any login attempt), then
    login with the private key and/or password (AuthenticationFailed). Thread-safe.

    sshd allows `MaxSessions` (10 by default) sessions at once per connection. `run()` keeps
    at most `max_sessions` of its own open and queues the rest; channels from
    `open_channel()` (long-lived streams) are the caller's to count. When the server still
    refuses one, opening retries until its timeout.

    Channels opened on `transport` directly (not through `open_channel`) lack the send-order
    guard of ordering.py: don't write to those from several threads.
    """

    def __init__(
        self,
        target: SshTarget,
        *,
        connect_timeout: float = 10.0,
        keepalive: int = 15,
        max_sessions: int = 8,
    ) -> None:
        self.target = target
        self.connect_timeout = connect_timeout
        self.max_sessions = max_sessions
        self._closed = False
        # Set once an operation met the connection's end (EOF) before paramiko's own thread
        # marked it inactive: the pool must not hand it out again in that moment.
        self._broken = False
        # run() calls beyond this wait here rather than be refused by sshd and retry. Below
        # sshd's default of 10 because sshd frees a finished session a moment after its
        # CLOSE: at 10, 10 busy threads met 313 refusals per 1000 commands; at 8, 59.
        self._sessions = threading.BoundedSemaphore(max_sessions)
        self._transport, self.host_key = _connect(target, connect_timeout, keepalive)
        self.last_used = time.monotonic()

    # -- state ---------------------------------------------------------------------------------

    @property
    def transport(self) -> paramiko.Transport:
        """The paramiko Transport, for what this class does not wrap (e.g. SFTP)."""
        return self._transport

    @property
    def socket(self) -> socket.socket:
        return self._transport.sock

    def is_alive(self) -> bool:
        """Whether the connection is believed open (no round trip: see `ping`)."""
        return not self._closed and not self._broken and self._transport.is_active()

    def mark_broken(self) -> None:
        """What a caller saw says the connection ended (an EOF on it): from now on it is not
        alive, even before paramiko's thread notices (the pool then makes a new one)."""
        self._broken = True

    def ping(self, timeout: float | None = None) -> None:
        """A real round trip (a session channel opened and closed): raises if it fails."""
        self.open_channel(timeout=timeout).close()

    def close(self) -> None:
        """Close the connection and every channel on it (their readers see EOF). Idempotent."""
        self._closed = True
        self._transport.close()

    def __enter__(self) -> SshConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "alive" if self.is_alive() else "closed"
        return f"<SshConnection {self.target.username}@{self.target.where} {state}>"

    # -- channels ------------------------------------------------------------------------------

    def open_channel(self, timeout: float | None = None) -> paramiko.Channel:
        """A new session channel; the caller runs one exec on it and closes it.

        The channel never sends after its CLOSE (see ordering.py): without that, one
        session ending while another thread writes to it drops the whole connection.

        Such channels are not counted against `max_sessions` (see the class docstring).
        While the server refuses the session because too many are open on this connection
        (sshd's MaxSessions), retries until `timeout` (default: the connect timeout).
        """
        timeout = self.connect_timeout if timeout is None else timeout
        give_up = time.monotonic() + timeout
        pause = _RETRY_BUSY[0]
        while True:
            self._check_open()
            self.last_used = time.monotonic()
            try:
                channel = self._transport.open_session(timeout=max(give_up - time.monotonic(), 0))
                return order_sends(channel)
            except paramiko.ChannelException as exc:
                refusal: Exception = exc
                if exc.code not in _OPEN_FAILED_BUSY:
                    raise SshError(f"{self.target.where} refused a session: {exc.text}") from exc
            except (paramiko.SSHException, EOFError, OSError) as exc:
                # paramiko keeps one "last error" per transport: when several threads are
                # refused at once, all but one get this generic message instead.
                if str(exc) != "Unable to open channel." or not self._transport.is_active():
                    raise self._failure(exc, "opening a session", timeout) from exc
                refusal = exc
            if time.monotonic() + pause > give_up:
                raise SshTimeout(
                    f"{self.target.where} refused new sessions for {round(timeout, 1):g} s: "
                    "its sshd allows only so many at once on one connection (MaxSessions, "
                    "10 by default)"
                ) from refusal
            time.sleep(pause)
            pause = min(pause * 2, _RETRY_BUSY[1])

    def run(
        self,
        command: str,
        *,
        stdin: bytes | None = None,
        timeout: float,
        max_output: int = DEFAULT_MAX_OUTPUT,
    ) -> RunResult:
        """Run `command` through the login user's shell and wait for it, at most `timeout` s.

        stdout and stderr keep their first `max_output` bytes each (the rest is read and
        dropped; RunResult says so). A non-zero exit is a result, not an error. Raises
        SshTimeout when the command outlives `timeout` (its channel is closed; a process that
        ignores the hang-up may keep running on the host), SshConnectionLost when the
        connection breaks meanwhile.
        """
        give_up = time.monotonic() + timeout
        if not self._sessions.acquire(timeout=timeout):
            raise SshTimeout(
                f"all {self.max_sessions} sessions to {self.target.where} stayed busy for "
                f"{round(timeout, 1):g} s"
            )
        try:
            channel = self.open_channel(timeout=max(give_up - time.monotonic(), 0))
            return self._run_on(channel, command, stdin, max_output, give_up, timeout)
        finally:
            self._sessions.release()

    def _run_on(
        self,
        channel: paramiko.Channel,
        command: str,
        stdin: bytes | None,
        max_output: int,
        give_up: float,
        timeout: float,
    ) -> RunResult:
        # The whole exchange, including waits paramiko makes without a timeout, ends when
        # the deadline closes the channel.
        deadline = watchdog.schedule(max(give_up - time.monotonic(), 0), channel.close)
        try:
            result = execute(channel, command, stdin, max_output)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            if deadline.fired:
                raise self._timed_out(timeout) from exc
            raise self._failure(exc, "running a command", timeout) from exc
        finally:
            deadline.cancel()
            _close_quietly(channel)
        if deadline.fired:
            raise self._timed_out(timeout)
        if result.exit_code is None and not self._transport.is_active():
            raise self._lost("while a command ran")
        return result

    # -- errors --------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise SshConnectionLost(f"the connection to {self.target.where} was closed")
        if self._broken or not self._transport.is_active():
            raise self._lost("")

    def _lost(self, when: str) -> SshConnectionLost:
        self._broken = True
        reason = self._transport.get_exception()
        detail = f": {reason}" if reason and str(reason) else ""
        when = f" {when}" if when else ""
        return SshConnectionLost(f"the connection to {self.target.where} was lost{when}{detail}")

    def _timed_out(self, timeout: float) -> SshTimeout:
        return SshTimeout(
            f"a command on {self.target.where} did not finish within {round(timeout, 1):g} s"
        )

    def _failure(self, exc: BaseException, doing: str, timeout: float) -> SshError:
        # EOFError: the socket ended; paramiko may not have marked the transport dead yet.
        if self._closed or isinstance(exc, EOFError) or not self._transport.is_active():
            return self._lost(f"while {doing}")
        if "timeout" in str(exc).lower():
            return SshTimeout(
                f"{doing} on {self.target.where} took longer than {round(timeout, 1):g} s"
            )
        return SshError(f"{doing} on {self.target.where} failed: {exc}")


def _close_quietly(channel: paramiko.Channel) -> None:
    # Closing sends CLOSE; on a connection that just died that raises, and the caller has a
    # better error to report (or a result).
    with contextlib.suppress(paramiko.SSHException, EOFError, OSError):
        channel.close()


# -- connecting ------------------------------------------------------------------------------


def _connect(
    target: SshTarget, timeout: float, keepalive: int
) -> tuple[paramiko.Transport, HostKey]:
    # A bad key or a missing credential fails before the network is touched.
    pkey = load_private_key(target.private_key, target.passphrase) if target.private_key else None
    if pkey is None and target.password is None:
        raise AuthenticationFailed(
            f"no credential for {target.username}@{target.where}: set a password or a private key"
        )
    transport = start_transport(
        target.address, target.port, timeout=timeout, host_key_type=target.host_key_type
    )
    try:
        # Before any login attempt: a password must never reach a host that is not the
        # pinned one.
        host_key = check_host_key(
            transport.get_remote_server_key(), target.fingerprint, target.address, target.port
        )
        _authenticate(transport, target, pkey)
        transport.set_keepalive(keepalive)
    except BaseException:
        transport.close()
        raise
    return transport, host_key


def _authenticate(
    transport: paramiko.Transport, target: SshTarget, pkey: paramiko.PKey | None
) -> None:
    methods: list[tuple[str, Callable[[], object]]] = []
    if pkey is not None:
        label = f"private key ({pkey.get_name()} {fingerprint(pkey)})"
        methods.append((label, lambda: transport.auth_publickey(target.username, pkey)))
    if target.password is not None:
        password = target.password
        methods.append(("password", lambda: transport.auth_password(target.username, password)))
    refused: list[str] = []
    allowed: list[str] | None = None
    for label, attempt in methods:
        try:
            attempt()
        except paramiko.BadAuthenticationType as exc:
            allowed = list(exc.allowed_types)
        except paramiko.AuthenticationException:
            pass
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise SshConnectionLost(
                f"the connection to {target.where} broke during login: {exc or 'closed'}"
            ) from exc
        # Not authenticated after a "success" means the server wants a second factor
        # (partial success): not something Sandhub offers.
        if transport.is_authenticated():
            return
        refused.append(label)
    message = (
        f"authentication failed for user {target.username} on {target.where}: the server "
        f"did not accept the {' nor the '.join(refused)}"
    )
    if allowed is not None:
        message += f" (it allows: {', '.join(allowed) or 'nothing'})"
    raise AuthenticationFailed(message)
