"""The platform as the client sees it: REST calls under /api/v1/ with the Bearer key, and the
MCP endpoint for what REST has no equivalent of (a command's output while it runs).

Transfers stream both ways: uploads send a generator's chunks as they come, downloads hand
out the response's chunks; nothing is held whole in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

import httpx2 as httpx

from sandhub import __version__
from sandhub.config import Config, normalize_url

MANIFEST_PAGE = 5000  # the platform's maximum: an unchanged 2,000-file tree is one request
MAX_PATHS_PER_CALL = 10_000  # sync/delete and sync/download take at most this many paths
LIST_PAGE = 200
# Transfers and commands may take long between bytes (a big tree being written, a quiet
# test suite): only connecting has a short limit.
TIMEOUT = httpx.Timeout(600.0, connect=15.0)
OutputHandler = Callable[[str, str], None]  # (stream: "stdout" | "stderr", text)


class ApiError(Exception):
    """The platform refused or failed a call (status 0: it could not be reached)."""

    def __init__(self, status: int, detail: str, code: str = "") -> None:
        super().__init__(detail)
        self.status, self.detail, self.code = status, detail, code


@dataclass
class Manifest:
    path: str  # the root as the platform resolved it (absolute)
    exists: bool
    entries: list[dict[str, Any]]


class Platform:
    """One platform, one key. Use as a context manager (or close()) to free its connections."""

    def __init__(self, url: str, key: str, *, transport: httpx.BaseTransport | None = None):
        self.url = normalize_url(url)
        self.key = key
        self._http = httpx.Client(
            base_url=f"{self.url}/api/v1/",
            headers={
                "Authorization": f"Bearer {key}",
                "User-Agent": f"sandhub-client/{__version__}",
            },
            timeout=TIMEOUT,
            transport=transport,
            # Plain http never uses TLS (and redirects are not followed): skip loading the CA
            # store, a tenth of a second of every short command.
            verify=self.url.startswith("https://"),
        )

    @classmethod
    def from_config(cls, config: Config) -> Platform:
        return cls(config.url, config.key)

    def __enter__(self) -> Platform:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # --- plumbing ------------------------------------------------------------------------

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ApiError(0, f"cannot reach {self.url}: {exc}") from exc
        if response.status_code >= 400:
            raise _error(response)
        return response.json() if response.content else None

    @contextlib.contextmanager
    def _stream(self, method: str, path: str, **kwargs: Any) -> Iterator[httpx.Response]:
        try:
            with self._http.stream(method, path, **kwargs) as response:
                if response.status_code >= 400:
                    response.read()
                    raise _error(response)
                yield response
        except httpx.TransportError as exc:
            raise ApiError(0, f"cannot reach {self.url}: {exc}") from exc

    def _pages(self, url: str, **params: Any) -> list[dict[str, Any]]:
        """Every item of a paginated list (limit/offset)."""
        items: list[dict[str, Any]] = []
        while True:
            page = self._call(
                "GET", url, params={**params, "limit": LIST_PAGE, "offset": len(items)}
            )
            items.extend(page["results"])
            if not page.get("next") or not page["results"]:
                return items

    # --- sandboxes, commands, background jobs --------------------------------------------

    def list_sandboxes(self) -> list[dict[str, Any]]:
        return self._pages("sandboxes/")

    def get_sandbox(self, sandbox_id: str) -> dict[str, Any]:
        return self._call("GET", f"sandboxes/{sandbox_id}/")

    def create_sandbox(self, **fields: Any) -> dict[str, Any]:
        """fields: image, name, cpus, memory_mb, disk_mb, env, lifetime_minutes, network."""
        return self._call("POST", "sandboxes/", json=fields)

    def delete_sandbox(self, sandbox_id: str) -> dict[str, Any]:
        return self._call("DELETE", f"sandboxes/{sandbox_id}/")

    def list_commands(self, sandbox_id: str, limit: int = 50) -> list[dict[str, Any]]:
        """The sandbox's newest commands first (background jobs among them)."""
        page = self._call("GET", f"sandboxes/{sandbox_id}/commands/", params={"limit": limit})
        return list(page["results"])

    def get_command(self, command_id: int) -> dict[str, Any]:
        return self._call("GET", f"commands/{command_id}/")

    def start_background(self, sandbox_id: str, command: str, **fields: Any) -> dict[str, Any]:
        return self._call(
            "POST", f"sandboxes/{sandbox_id}/background/", json={"command": command, **fields}
        )

    def check_background(
        self, sandbox_id: str, command_id: int, tail_lines: int = 20
    ) -> dict[str, Any]:
        return self._call(
            "GET",
            f"sandboxes/{sandbox_id}/background/{command_id}/",
            params={"tail_lines": tail_lines},
        )

    def cancel_background(self, sandbox_id: str, command_id: int) -> dict[str, Any]:
        return self._call("POST", f"sandboxes/{sandbox_id}/background/{command_id}/cancel/")

    # --- files -----------------------------------------------------------------------------

    def list_files(self, sandbox_id: str, path: str) -> list[dict[str, Any]]:
        return self._pages(f"sandboxes/{sandbox_id}/files/", path=path)

    def upload_file(
        self, sandbox_id: str, path: str, content: IO[bytes] | Iterable[bytes]
    ) -> dict[str, Any]:
        """Write one file at `path` from a file object or chunks, streamed."""
        body = _chunks_of(content) if hasattr(content, "read") else content
        return self._call(
            "POST",
            f"sandboxes/{sandbox_id}/files/",
            params={"path": path},
            content=body,
            headers={"Content-Type": "application/octet-stream"},
        )

    @contextlib.contextmanager
    def download_file(self, sandbox_id: str, path: str) -> Iterator[Iterator[bytes]]:
        """One file's content as chunks, while the context is open."""
        url = f"sandboxes/{sandbox_id}/files/download"
        with self._stream("GET", url, params={"path": path}) as response:
            yield response.iter_bytes()

    # --- sync ------------------------------------------------------------------------------

    def manifest_page(
        self, sandbox_id: str, path: str, *, after: str | None = None, limit: int = MANIFEST_PAGE
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"path": path, "limit": limit}
        if after is not None:
            params["after"] = after
        return self._call("GET", f"sandboxes/{sandbox_id}/manifest/", params=params)

    def manifest(self, sandbox_id: str, path: str) -> Manifest:
        """Every entry under `path` (files, dirs, links), page after page."""
        page = self.manifest_page(sandbox_id, path)
        result = Manifest(
            path=page.get("path", path), exists=page.get("exists", True), entries=page["entries"]
        )
        while page.get("next"):
            page = self.manifest_page(sandbox_id, path, after=page["next"])
            result.entries.extend(page["entries"])
        return result

    def sync_upload(self, sandbox_id: str, path: str, tar: Iterable[bytes]) -> dict[str, Any]:
        """Send one tar (chunks from a generator, streamed) to be unpacked under `path`."""
        return self._call(
            "POST",
            f"sandboxes/{sandbox_id}/sync/",
            params={"path": path},
            content=tar,
            headers={"Content-Type": "application/x-tar"},
        )

    def sync_delete(self, sandbox_id: str, path: str, paths: Sequence[str]) -> int:
        """Remove these entries (relative to `path`); returns how many went."""
        deleted = 0
        for start in range(0, len(paths), MAX_PATHS_PER_CALL):
            batch = list(paths[start : start + MAX_PATHS_PER_CALL])
            answer = self._call(
                "POST",
                f"sandboxes/{sandbox_id}/sync/delete/",
                json={"path": path, "paths": batch},
            )
            deleted += int(answer.get("deleted", 0))
        return deleted

    @contextlib.contextmanager
    def sync_download(
        self, sandbox_id: str, path: str, paths: Sequence[str]
    ) -> Iterator[Iterator[bytes]]:
        """These entries (at most MAX_PATHS_PER_CALL) as one tar, in chunks."""
        url = f"sandboxes/{sandbox_id}/sync/download/"
        with self._stream("POST", url, json={"path": path, "paths": list(paths)}) as response:
            yield response.iter_bytes()

    # --- MCP -------------------------------------------------------------------------------

    @property
    def mcp_url(self) -> str:
        return f"{self.url}/mcp/"

    def run_command(
        self,
        sandbox_id: str,
        command: str,
        *,
        on_output: OutputHandler | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Run a command through the MCP endpoint's run_command, handing its output to
        `on_output` as it arrives; the result has exit_code, stdout, stderr, status."""
        arguments: dict[str, Any] = {"sandbox_id": sandbox_id, "command": command}
        for name, value in (("cwd", cwd), ("env", env), ("timeout", timeout)):
            if value is not None:
                arguments[name] = value
        return asyncio.run(self._call_tool("run_command", arguments, on_output))

    async def _call_tool(
        self, name: str, arguments: dict[str, Any], on_output: OutputHandler | None
    ) -> dict[str, Any]:
        from fastmcp import Client  # imported here: it is the slowest import, and rare
        from fastmcp.exceptions import ToolError

        async def on_log(message: Any) -> None:
            data = message.data
            text = data.get("msg", "") if isinstance(data, dict) else str(data)
            if on_output is not None and text:
                on_output(message.logger or "stdout", text)

        client = Client(self.mcp_url, auth=self.key, log_handler=on_log, timeout=None)
        try:
            async with client:
                result = await client.call_tool(name, arguments)
        except ToolError as exc:
            raise ApiError(400, str(exc), "tool_error") from exc
        except httpx.HTTPStatusError as exc:
            raise ApiError(exc.response.status_code, f"the MCP endpoint said: {exc}") from exc
        except (httpx.TransportError, OSError) as exc:
            raise ApiError(0, f"cannot reach {self.mcp_url}: {exc}") from exc
        data = result.structured_content
        if not isinstance(data, dict):
            raise ApiError(502, f"{name} returned no structured result")
        return data


def _chunks_of(handle: Any, size: int = 1024 * 1024) -> Iterator[bytes]:
    while block := handle.read(size):
        yield block


def _error(response: httpx.Response) -> ApiError:
    """The platform's {"detail", "code"} (or DRF's field errors) as one readable message."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "detail" in body:
        return ApiError(response.status_code, str(body["detail"]), str(body.get("code", "")))
    if isinstance(body, dict):
        parts = [
            f"{field}: {' '.join(map(str, problems)) if isinstance(problems, list) else problems}"
            for field, problems in body.items()
        ]
        return ApiError(response.status_code, "; ".join(parts), "invalid")
    text = response.text.strip()[:300] or response.reason_phrase
    return ApiError(response.status_code, f"HTTP {response.status_code}: {text}")
