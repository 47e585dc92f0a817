"""Tools that move files in and out of a sandbox (text or base64, many files per round trip)."""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlencode

from django.conf import settings
from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from mcp_bridge import identity
from mcp_bridge.args import (
    INLINE_LIMIT_TEXT,
    MAX_INLINE_CHARS,
    Encoding,
    FileIn,
    Files,
    Path,
    SandboxId,
)
from mcp_bridge.runtime import call
from mcp_bridge.schemas import (
    Entry,
    File,
    FileChunk,
    FileList,
    FilesWritten,
    Listing,
    encode,
    file_chunk,
)
from sandboxes import services
from sandboxes.contract.errors import InvalidInput
from sandboxes.contract.results import UploadFile
from sandboxes.policy.validation import WORKSPACE

READ_ONLY = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
WRITES = ToolAnnotations(readOnlyHint=False, destructiveHint=True, openWorldHint=False)
DEFAULT_DOWNLOAD_BYTES = 4 * 1024 * 1024
MAX_DOWNLOAD_BYTES = 32 * 1024 * 1024


def to_uploads(files: list[FileIn]) -> list[UploadFile]:
    uploads = []
    for index, item in enumerate(files):
        try:
            uploads.append(
                UploadFile.inline(
                    item.path, item.content, encoding=item.encoding, executable=item.executable
                )
            )
        except InvalidInput as exc:
            raise ToolError(f"files[{index}] ({item.path}): {exc.message}") from exc
    return uploads


def download_url(caller: identity.Caller, sandbox_id: str, path: str) -> str:
    """Where a person (signed in, or with a key) can download the file over HTTP; relative
    to the web server when the call did not come over HTTP (stdio). The team is named so a
    browser session of someone in several teams acts in the right one."""
    base = identity.request_base_url() or "/"
    query = urlencode({"path": path, "team": caller.key.team.slug})
    return f"{base}api/v1/sandboxes/{sandbox_id}/files/download?{query}"


def register(mcp: FastMCP) -> None:
    @mcp.tool(annotations=WRITES)
    async def upload_files(files: Files, sandbox_id: SandboxId = None) -> FilesWritten:
        """Write several files into a sandbox's /workspace in one round trip (creating
        directories, replacing existing files). Content is text, or base64 for binary files;
        one call carries at most 4 MiB in all (bigger files: several calls, or the REST upload
        or `sandhub cp`)."""
        uploads = to_uploads(files)

        def body() -> FilesWritten:
            caller = identity.caller()
            target = caller.sandbox(sandbox_id)
            return FilesWritten.model_validate(
                services.upload_files(caller.principal, target, uploads)
            )

        return await call(body)

    @mcp.tool(annotations=WRITES)
    async def write_file(
        path: Path,
        content: Annotated[
            str,
            Field(
                description="Text, or base64 when encoding is base64. " + INLINE_LIMIT_TEXT,
                max_length=MAX_INLINE_CHARS,
            ),
        ],
        sandbox_id: SandboxId = None,
        encoding: Annotated[
            Literal["text", "base64"], Field(description="How content is written.")
        ] = "text",
        executable: Annotated[bool, Field(description="Make it executable (755).")] = False,
    ) -> FilesWritten:
        """Write one file in a sandbox's /workspace, creating directories, replacing it if it
        exists."""
        uploads = to_uploads(
            [FileIn(path=path, content=content, encoding=encoding, executable=executable)]
        )

        def body() -> FilesWritten:
            caller = identity.caller()
            item = uploads[0]
            return FilesWritten.model_validate(
                services.write_file(
                    caller.principal,
                    caller.sandbox(sandbox_id),
                    item.path,
                    item.content,
                    mode=item.mode,
                )
            )

        return await call(body)

    @mcp.tool(annotations=READ_ONLY)
    async def download_files(
        paths: Annotated[
            list[Annotated[str, Field(min_length=1, max_length=4096)]],
            Field(
                description="Files or directories (every file under them is returned).",
                min_length=1,
                max_length=100,
            ),
        ],
        sandbox_id: SandboxId = None,
        encoding: Encoding = "auto",
        max_total_bytes: Annotated[
            int,
            Field(
                description="Refuse if the files hold more than this; fetch big files with "
                "their download URL instead.",
                ge=1,
                le=MAX_DOWNLOAD_BYTES,
            ),
        ] = DEFAULT_DOWNLOAD_BYTES,
    ) -> FileList:
        """Fetch files from a sandbox: each file's path, size and content (text, or base64
        for binary). Directories give every file under them."""

        def body() -> FileList:
            caller = identity.caller()
            target = caller.sandbox(sandbox_id)
            # The service refuses as soon as the files' sizes pass the limit, before their
            # content is read.
            limit = min(max_total_bytes, settings.SANDHUB_MAX_TRANSFER_BYTES)
            try:
                found = services.download_files(caller.principal, target, paths, max_bytes=limit)
            except InvalidInput as exc:
                if "more than" not in exc.message:
                    raise
                raise ToolError(
                    f"{exc.message} (max_total_bytes={max_total_bytes}); ask for fewer files, "
                    f"or download them one by one over HTTP, e.g. "
                    f"{download_url(caller, target, paths[0])}"
                ) from exc
            total = sum(len(content) for _, content in found)
            files = []
            for path, content in found:
                kind, text = encode(content, encoding)
                files.append(
                    File(
                        path=path,
                        size=len(content),
                        encoding=kind,
                        content=text,
                        download_url=download_url(caller, target, path),
                    )
                )
            return FileList(files=files, total_bytes=total, resumed_seconds=found.resumed_seconds)

        return await call(body)

    @mcp.tool(annotations=READ_ONLY)
    async def list_files(path: Path = WORKSPACE, sandbox_id: SandboxId = None) -> Listing:
        """List a directory in a sandbox (name, kind, size, modification time, mode of each
        entry), or the one entry of a file."""

        def body() -> Listing:
            caller = identity.caller()
            entries = services.list_files(caller.principal, caller.sandbox(sandbox_id), path)
            return Listing(
                path=path,
                entries=[Entry.model_validate(e) for e in entries],
                resumed_seconds=entries.resumed_seconds,
            )

        return await call(body)

    @mcp.tool(annotations=READ_ONLY)
    async def read_file(
        path: Path,
        sandbox_id: SandboxId = None,
        offset: Annotated[int, Field(description="Byte to start at.", ge=0)] = 0,
        max_bytes: Annotated[
            int,
            Field(description="Bytes to return at most.", ge=1, le=services.READ_FILE_MAX_BYTES),
        ] = 256 * 1024,
        encoding: Encoding = "auto",
    ) -> FileChunk:
        """Read a file from a sandbox, or a part of it (offset, max_bytes): says the whole
        file's size and whether the end was reached (eof) so big files can be paged."""

        def body() -> FileChunk:
            caller = identity.caller()
            target = caller.sandbox(sandbox_id)
            content = services.read_file(
                caller.principal, target, path, offset=offset, max_bytes=max_bytes
            )
            return file_chunk(content, encoding, download_url(caller, target, content.path))

        return await call(body)
