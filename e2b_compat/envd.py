"""envd's Connect RPCs (the in-sandbox API E2B's SDKs call): one async view routes
`/<package>.<Service>/<Method>` to its handler after checking the caller's access token for the
sandbox the request names (`E2b-Sandbox-Id`, as the SDKs send it with E2B_SANDBOX_URL, or the
sandbox's own host name: routing.py). Process handlers are here; filesystem ones in
fsrpc.py. Every handler calls sandboxes.services as the token's key's user.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from google.protobuf.message import Message

from e2b_compat import connect, fsrpc, processes
from e2b_compat.auth import Caller, envd_caller
from e2b_compat.connect import Codec, ConnectError
from e2b_compat.errors import api_error, as_connect_error, connect_error_response
from e2b_compat.proto import process_pb2 as pb
from sandboxes import services
from sandboxes.contract.errors import NotFound
from sandboxes.http.dbthreads import in_db_thread
from tenants.apikeys import clean_address

__all__ = ["rpc"]

KEEPALIVE_HEADER = "Keepalive-Ping-Interval"
Unary = Callable[[Caller, str, Any], Awaitable[Message]]
Streaming = Callable[[Caller, str, Any, HttpRequest], Awaitable[AsyncIterator[Message]]]


@csrf_exempt
async def rpc(request: HttpRequest, service: str, method: str) -> HttpResponseBase:
    if request.method != "POST":
        return connect_error_response(ConnectError("unimplemented", "envd RPCs are POSTs"))
    route = ROUTES.get((service, method))
    if route is None:
        return connect_error_response(
            ConnectError("unimplemented", f"{service}/{method} is not served by Sandhub")
        )
    message_type, handler, streaming = route
    try:
        codec = connect.codec_for(request.headers.get("Content-Type", ""))
    except ConnectError as refused:
        return connect_error_response(refused)
    try:
        if codec.streaming != streaming:
            kind = "a stream" if streaming else "not a stream"
            raise ConnectError("invalid_argument", f"{method} is {kind}")
        sandbox_id = sandbox_of(request)
        caller = await in_db_thread(
            envd_caller,
            request.headers.get("X-Access-Token"),
            sandbox_id,
            clean_address(request.META.get("REMOTE_ADDR")),
        )
        encoding = request.headers.get(
            "Connect-Content-Encoding" if streaming else "Content-Encoding", ""
        )
        if streaming:
            message = connect.decode_stream_request(request.body, codec, message_type(), encoding)
            events = await handler(caller, sandbox_id, message, request)
            keepalive = (_keepalive_seconds(request), KEEPALIVES[(service, method)])
            return _stream(codec, events, keepalive)
        message = connect.decode_unary(request.body, codec, message_type(), encoding)
        answer = await handler(caller, sandbox_id, message)
        return HttpResponse(codec.serialize(answer), content_type=codec.content_type)
    except Exception as exc:
        error = as_connect_error(exc)
        if error is None:
            raise
        if codec.streaming:  # a stream's error is its last envelope, on a 200
            return _stream(codec, _no_events(), None, error)
        return connect_error_response(error)


@csrf_exempt
async def health(request: HttpRequest) -> HttpResponse:
    """envd's /health, which E2B's SDKs ask after a failed call and for is_running(): 204
    while the sandbox runs, 502 saying it "was not found" otherwise (paused, stopped or gone:
    the SDK then reports it not running); only to its token's holder."""
    try:
        sandbox_id = sandbox_of(request)
        caller = await in_db_thread(
            envd_caller,
            request.headers.get("X-Access-Token"),
            sandbox_id,
            clean_address(request.META.get("REMOTE_ADDR")),
        )
        info = await in_db_thread(services.get_sandbox, caller.principal, sandbox_id)
        # Past its timeout it is as good as gone: the sweep deletes it within the minute.
        expired = info.expires_at is not None and info.expires_at <= timezone.now()
        gone = info.status != "running" or expired
    except NotFound:
        gone = True
    except Exception as exc:
        error = as_connect_error(exc)
        if error is None:
            raise
        return api_error(error.status, error.message)
    if gone:
        return api_error(502, f"sandbox {sandbox_id} was not found")
    return HttpResponse(status=204)


def sandbox_of(request: HttpRequest) -> str:
    sandbox_id = request.headers.get("E2b-Sandbox-Id")  # set from the host name: routing.py
    if not sandbox_id:
        raise ConnectError("invalid_argument", "name the sandbox: E2b-Sandbox-Id")
    return str(sandbox_id)


def _keepalive_seconds(request: HttpRequest) -> float | None:
    try:
        seconds = float(request.headers.get(KEEPALIVE_HEADER, ""))
    except ValueError:
        return None
    return max(seconds, 1.0)


async def _no_events() -> AsyncIterator[Message]:
    return
    yield  # an async generator with nothing in it


def _stream(
    codec: Codec,
    events: AsyncIterator[Message],
    keepalive: tuple[float | None, Message] | None,
    error: ConnectError | None = None,
) -> StreamingHttpResponse:
    async def body() -> AsyncIterator[bytes]:
        failure = error
        try:
            async for event in _with_keepalives(events, keepalive):
                yield connect.envelope(codec, event)
        except Exception as exc:
            failure = as_connect_error(exc) or ConnectError("internal", "the stream failed")
        yield connect.end_of_stream(failure)

    response = StreamingHttpResponse(body(), content_type=codec.content_type)
    response["Cache-Control"] = "no-store"
    response["X-Accel-Buffering"] = "no"  # a proxy passes each event on at once
    return response


async def _with_keepalives(
    events: AsyncIterator[Message], keepalive: tuple[float | None, Message] | None
) -> AsyncIterator[Message]:
    """The events, and the stream's KeepAlive message whenever none came for the seconds the
    client asked (E2B's SDKs ask, so that idle proxies do not cut a long command's stream)."""
    every, message = keepalive or (None, None)
    iterator = events.__aiter__()
    waiting: asyncio.Future[Message] | None = None
    try:
        while True:
            waiting = asyncio.ensure_future(iterator.__anext__())
            while not (await asyncio.wait({waiting}, timeout=every))[0]:
                if message is not None:
                    yield message
            try:
                yield waiting.result()
            except StopAsyncIteration:
                return
    finally:
        if waiting is not None and not waiting.done():
            waiting.cancel()  # the client went: stop following (the process runs on)


# --- process.Process ----------------------------------------------------------------------


async def start(
    caller: Caller, sandbox_id: str, request: pb.StartRequest, http: HttpRequest
) -> AsyncIterator[Message]:
    if request.HasField("pty"):
        raise ConnectError("unimplemented", "PTY processes are not supported by Sandhub yet")
    process = await asyncio.to_thread(
        processes.start, caller.principal, sandbox_id, request, processes.process_timeout()
    )
    if process.failure is not None:
        raise process.failure
    return _events(process.follow(replay=True), pb.StartResponse)


async def connect_process(
    caller: Caller, sandbox_id: str, request: pb.ConnectRequest, http: HttpRequest
) -> AsyncIterator[Message]:
    pid = await _pid_of(caller, sandbox_id, request.process)
    process = processes.find(pid)
    if process is not None and process.sandbox_id == sandbox_id:
        return _events(process.follow(replay=False), pb.ConnectResponse)
    # Not run here: refused at once if there is no such command (as envd refuses a pid it
    # does not know), else followed from the history.
    command = await in_db_thread(_command, caller, sandbox_id, pid)
    if command.background:
        raise ConnectError("not_found", f"process with pid {pid} not found")
    return _events(_recorded(caller, sandbox_id, pid), pb.ConnectResponse)


async def _events(
    events: AsyncIterator[pb.ProcessEvent], wrapper: type[Message]
) -> AsyncIterator[Message]:
    async for event in events:
        yield wrapper(event=event)


async def _recorded(caller: Caller, sandbox_id: str, pid: int) -> AsyncIterator[pb.ProcessEvent]:
    """A command this process does not run: its end from the history, once it came."""
    yield pb.ProcessEvent(start=pb.ProcessEvent.StartEvent(pid=pid))
    while True:
        command = await in_db_thread(_command, caller, sandbox_id, pid)
        if command.status != "running":
            break
        await asyncio.sleep(0.5)
    if command.stdout:
        yield pb.ProcessEvent(data=pb.ProcessEvent.DataEvent(stdout=command.stdout.encode()))
    if command.stderr:
        yield pb.ProcessEvent(data=pb.ProcessEvent.DataEvent(stderr=command.stderr.encode()))
    yield pb.ProcessEvent(
        end=processes._end_of(command.status, command.exit_code, command.error_message)
    )


def _command(caller: Caller, sandbox_id: str, pid: int) -> Any:
    try:
        command = services.get_command(caller.principal, pid)
    except NotFound:
        command = None
    if command is None or command.sandbox_id != sandbox_id:
        raise ConnectError("not_found", f"process with pid {pid} not found")
    return command


async def _pid_of(caller: Caller, sandbox_id: str, selector: pb.ProcessSelector) -> int:
    which = selector.WhichOneof("selector")
    if which == "pid":
        return int(selector.pid)
    if which == "tag":
        for process in processes.running_here(sandbox_id):
            if process.tag == selector.tag:
                return process.pid
        raise ConnectError("not_found", f"process with tag {selector.tag} not found")
    raise ConnectError("invalid_argument", "select the process by pid or tag")


async def list_processes(caller: Caller, sandbox_id: str, request: pb.ListRequest) -> Message:
    running = await in_db_thread(_running_commands, caller, sandbox_id)
    answer = pb.ListResponse()
    for command in running:
        info = answer.processes.add(pid=command.id)
        here = processes.find(command.id)
        if here is not None:
            info.config.CopyFrom(here.config)
            if here.tag is not None:
                info.tag = here.tag
        else:
            info.config.cmd, info.config.args[:] = "/bin/bash", ["-l", "-c", command.command]
    return answer


def _running_commands(caller: Caller, sandbox_id: str) -> list[Any]:
    commands = services.list_commands(caller.principal, sandbox_id, limit=200)
    return [c for c in commands if c.status == "running" and not c.background]


async def send_signal(caller: Caller, sandbox_id: str, request: pb.SendSignalRequest) -> Message:
    pid = await _pid_of(caller, sandbox_id, request.process)
    killed = await in_db_thread(services.kill_command, caller.principal, sandbox_id, pid)
    if not killed:
        raise ConnectError("not_found", f"process with pid {pid} not found")
    return pb.SendSignalResponse()


def _stdin_of(sandbox_id: str, pid: int) -> services.StdinPipe:
    process = processes.find(pid)
    if process is None or process.sandbox_id != sandbox_id:
        raise ConnectError(
            "not_found",
            f"process with pid {pid} not found here (input goes to the web process running it)",
        )
    if process.stdin is None:
        raise ConnectError("failed_precondition", f"process {pid} was started without stdin")
    return process.stdin


async def send_input(caller: Caller, sandbox_id: str, request: pb.SendInputRequest) -> Message:
    pid = await _pid_of(caller, sandbox_id, request.process)
    pipe = _stdin_of(sandbox_id, pid)
    if request.input.WhichOneof("input") != "stdin":
        raise ConnectError("unimplemented", "terminal (PTY) input is not supported yet")
    try:
        await asyncio.to_thread(pipe.write, request.input.stdin)
    except services.StdinClosed as exc:
        raise ConnectError("failed_precondition", f"process {pid}: {exc}") from exc
    except TimeoutError as exc:
        raise ConnectError("resource_exhausted", f"process {pid}: {exc}") from exc
    return pb.SendInputResponse()


async def close_stdin(caller: Caller, sandbox_id: str, request: pb.CloseStdinRequest) -> Message:
    pid = await _pid_of(caller, sandbox_id, request.process)
    _stdin_of(sandbox_id, pid).close()
    return pb.CloseStdinResponse()


async def not_supported(caller: Caller, sandbox_id: str, request: Any, *rest: Any) -> Message:
    raise ConnectError("unimplemented", "a terminal's size is not supported yet")


_PROCESS_KEEPALIVE = pb.ProcessEvent(keepalive=pb.ProcessEvent.KeepAlive())
KEEPALIVES: dict[tuple[str, str], Message] = {
    ("process.Process", "Start"): pb.StartResponse(event=_PROCESS_KEEPALIVE),
    ("process.Process", "Connect"): pb.ConnectResponse(event=_PROCESS_KEEPALIVE),
    **fsrpc.KEEPALIVES,
}

ROUTES: dict[tuple[str, str], tuple[type[Message], Any, bool]] = {
    ("process.Process", "Start"): (pb.StartRequest, start, True),
    ("process.Process", "Connect"): (pb.ConnectRequest, connect_process, True),
    ("process.Process", "List"): (pb.ListRequest, list_processes, False),
    ("process.Process", "SendSignal"): (pb.SendSignalRequest, send_signal, False),
    ("process.Process", "SendInput"): (pb.SendInputRequest, send_input, False),
    ("process.Process", "CloseStdin"): (pb.CloseStdinRequest, close_stdin, False),
    ("process.Process", "Update"): (pb.UpdateRequest, not_supported, False),
    **fsrpc.ROUTES,
}
