"""Argument types shared by the tools: a description and limits on every one, so an agent
sees what is expected in the schema and a wrong call fails before anything happens."""

from __future__ import annotations

from typing import Annotated, Literal

from django.conf import settings
from pydantic import BaseModel, ConfigDict, Field

from sandboxes.policy.validation import MAX_COMMAND_CHARS, WORKSPACE

# Inline file content (text, or base64 of binary) per file. Over HTTP one request body is at
# most 4 MiB (4,194,304 bytes: the MCP SDK's limit, answered by mcp_bridge/bodylimit.py), so
# a file's content must leave room for the call's JSON around it: 4,000,000 characters, i.e.
# about 4 MB of text or 3 MB of binary once base64. Larger files go through the REST API or
# `sandhub cp`, which stream.
MAX_INLINE_CHARS = 4_000_000
INLINE_LIMIT_TEXT = (
    "At most 4,000,000 characters (about 4 MB of text, or 3 MB of binary as base64); one call "
    "carries at most 4 MiB in all, so files sent together share that. Bigger files: send them "
    "in parts, or use the REST upload or `sandhub cp`."
)
DEFAULT_OUTPUT_BYTES = 64 * 1024

SandboxId = Annotated[
    str | None,
    Field(
        description="Sandbox id, like sb_k3j9x0a2b4c6 (create_sandbox returns it). May be "
        "omitted only in an MCP session with a selected sandbox (select_sandbox; "
        "create_sandbox selects the new one): clients without a session must pass it.",
        max_length=40,
    ),
]
# For tools that delete or stop: never the selection, which might not be the sandbox meant.
RequiredSandboxId = Annotated[
    str,
    Field(
        description="Sandbox id, like sb_k3j9x0a2b4c6. Always required: this tool never "
        "acts on the selected sandbox.",
        min_length=1,
        max_length=40,
    ),
]
Path = Annotated[
    str,
    Field(
        description=f"Path in the sandbox; relative paths start at {WORKSPACE}.",
        min_length=1,
        max_length=4096,
    ),
]
Cwd = Annotated[
    str,
    Field(description=f"Working directory (relative ones start at {WORKSPACE}).", max_length=4096),
]
Env = Annotated[
    dict[str, str] | None,
    Field(description="Extra environment variables for this call.", max_length=200),
]
Timeout = Annotated[
    float | None,
    Field(
        description="Seconds before the command is killed inside the sandbox "
        f"(default {settings.SANDHUB_DEFAULT_TIMEOUT_SECONDS}).",
        gt=0,
        le=settings.SANDHUB_MAX_TIMEOUT_SECONDS,
    ),
]
MaxOutput = Annotated[
    int,
    Field(
        description="Bytes of stdout and of stderr to return; longer output keeps its head and "
        "tail with a '[N bytes cut]' mark in the middle.",
        ge=1024,
        le=settings.SANDHUB_OUTPUT_CAP_BYTES,
    ),
]
Command = Annotated[
    str,
    Field(
        description="Shell command, run with bash -c.", min_length=1, max_length=MAX_COMMAND_CHARS
    ),
]
Encoding = Annotated[
    Literal["auto", "text", "base64"],
    Field(description="auto: text when the bytes are UTF-8, else base64."),
]


class FileIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: Path
    content: str = Field(
        description="The file's content: text, or base64 when encoding is base64. "
        + INLINE_LIMIT_TEXT,
        max_length=MAX_INLINE_CHARS,
    )
    encoding: Literal["text", "base64"] = Field("text", description="How content is written.")
    executable: bool = Field(False, description="Make the file executable (mode 755).")


Files = Annotated[
    list[FileIn],
    Field(
        description=f"Files to write (inside {WORKSPACE}); together at most 4 MiB per call "
        "with the JSON around them.",
        min_length=1,
        max_length=1000,
    ),
]
