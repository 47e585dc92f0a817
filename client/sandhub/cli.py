"""The `sandhub` command.

Exit codes: 0 done; 1 the platform refused or failed (the message says why), or a local
problem; 2 a usage error; `sandhub run` exits with the command's own exit code (124 when the
platform killed it at its timeout).
"""

from __future__ import annotations

import argparse
import getpass
import os
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sandhub import __version__, config
from sandhub.api import ApiError, Platform
from sandhub.parser import build_parser
from sandhub.progress import Bar
from sandhub.sync import SyncReport, pull, push
from sandhub.tarstream import TransferError

# SANDBOX:PATH (a sandbox id or name, a colon); write ./a:b for a local path with a colon.
REMOTE = re.compile(r"^([A-Za-z0-9][\w.-]*):(.*)$", re.DOTALL)
DEFAULT_REMOTE = "/workspace"
TIMED_OUT = 124  # as coreutils' timeout


class UsageError(Exception):
    """The command line is wrong (exit 2)."""


class NotFound(Exception):
    """What the command line names does not exist on the platform (exit 1, like the
    platform's own "not found": the command was well formed)."""


def remote_spec(text: str) -> tuple[str, str] | None:
    """(sandbox, path) for SANDBOX:PATH, None for a local path."""
    match = REMOTE.match(text)
    if match is None:
        return None
    return match.group(1), match.group(2) or DEFAULT_REMOTE


def resolve(platform: Platform, ref: str) -> str:
    """A sandbox id from an id or a name (names are looked up in the team's list)."""
    if ref.startswith("sb_"):
        return ref
    found = [box["id"] for box in platform.list_sandboxes() if box.get("name") == ref]
    if len(found) == 1:
        return str(found[0])
    if not found:
        raise NotFound(f"no sandbox named {ref!r} (sandhub sandboxes lists them)")
    raise UsageError(f"{len(found)} sandboxes are named {ref!r}: use an id ({', '.join(found)})")


def connect() -> Platform:
    return Platform.from_config(config.load())


def err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --- commands ------------------------------------------------------------------------------


def cmd_login(args: argparse.Namespace) -> int:
    url = args.url or input("Sandhub URL (e.g. http://127.0.0.1:8000): ").strip()
    key = args.key or os.environ.get(config.KEY_ENV) or getpass.getpass("API key (shk_...): ")
    with Platform(url, key) as platform:
        platform.list_sandboxes()  # a wrong key or URL fails here, not on first use
        path = config.save(platform.url, key)
    err(f"logged in to {platform.url}; saved in {path}")
    return 0


def cmd_sandboxes(args: argparse.Namespace) -> int:
    with connect() as platform:
        if args.action == "create":
            fields: dict[str, Any] = {
                name: getattr(args, name)
                for name in ("name", "image", "cpus", "memory_mb", "disk_mb", "lifetime_minutes")
                if getattr(args, name) is not None
            }
            if args.network is not None:
                fields["network"] = args.network
            if args.env:
                fields["env"] = dict(_pair(item) for item in args.env)
            box = platform.create_sandbox(**fields)
            print(box["id"])
            err(f"{box['id']} {box['status']} on {box.get('host') or '-'}")
        elif args.action == "rm":
            for ref in args.ids:
                box = platform.delete_sandbox(resolve(platform, ref))
                err(f"{box['id']} {box['status']}")
        else:
            rows = [
                [
                    b["id"],
                    b["name"] or "-",
                    b["status"],
                    b["image"],
                    b.get("host") or "-",
                    (b.get("expires_at") or "-")[:19],
                ]
                for b in platform.list_sandboxes()
            ]
            _table(["ID", "NAME", "STATUS", "IMAGE", "HOST", "EXPIRES"], rows)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    words = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not words:
        raise UsageError("nothing to run: sandhub run SANDBOX -- COMMAND")
    command = words[0] if len(words) == 1 else shlex.join(words)
    printed: dict[str, list[str]] = {"stdout": [], "stderr": []}

    def on_output(stream: str, text: str) -> None:
        stream = "stderr" if stream == "stderr" else "stdout"
        out = sys.stderr if stream == "stderr" else sys.stdout
        out.write(text)
        out.flush()
        printed[stream].append(text)

    env = dict(_pair(item) for item in args.env) if args.env else None
    with connect() as platform:
        sandbox = resolve(platform, args.sandbox)
        try:
            result = platform.run_command(
                sandbox, command, on_output=on_output, cwd=args.cwd, env=env, timeout=args.timeout
            )
        except ApiError as exc:
            if exc.code == "tool_error" and "timed out" in exc.detail:
                err(f"sandhub: {exc.detail}")
                return TIMED_OUT
            raise
    for stream, out in (("stdout", sys.stdout), ("stderr", sys.stderr)):
        whole, shown = str(result.get(stream) or ""), "".join(printed[stream])
        _rest_of(whole, shown, bool(result.get(f"{stream}_truncated")), out)
    if result.get("exit_code") is None:
        err(f"sandhub: {result.get('error_message') or result.get('status')}")
        return 1
    return int(result["exit_code"])


def cmd_cp(args: argparse.Namespace) -> int:
    from sandhub import transfer

    source, target = remote_spec(args.source), remote_spec(args.target)
    if (source is None) == (target is None):
        raise UsageError("one side of cp must be SANDBOX:PATH and the other a local path")
    with connect() as platform:
        if target is not None:
            sandbox = resolve(platform, target[0])
            where = transfer.upload(
                platform,
                Path(args.source),
                sandbox,
                target[1],
                excludes=args.exclude,
                progress=Bar(),
            )
            err(f"copied {args.source} to {sandbox}:{where}")
        else:
            assert source is not None
            sandbox = resolve(platform, source[0])
            local = transfer.download(
                platform,
                sandbox,
                source[1],
                Path(args.target),
                excludes=args.exclude,
                progress=Bar(),
            )
            err(f"copied {sandbox}:{source[1]} to {local}")
    return 0


def cmd_sync(args: argparse.Namespace) -> int:
    source, target = remote_spec(args.source), remote_spec(args.target)
    if (source is None) == (target is None):
        raise UsageError("sync LOCAL SANDBOX:PATH, or sync SANDBOX:PATH LOCAL")
    options: dict[str, Any] = {
        "excludes": args.exclude,
        "gitignore": args.gitignore,
        "delete": args.delete,
        "dry_run": args.dry_run,
        "progress": Bar(),
    }
    with connect() as platform:
        if target is not None:
            sandbox = resolve(platform, target[0])
            report = push(platform, args.source, sandbox, target[1], **options)
        else:
            assert source is not None
            sandbox = resolve(platform, source[0])
            report = pull(platform, sandbox, source[1], args.target, **options)
    _summary(report, args.dry_run, args.verbose)
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    with connect() as platform:
        sandbox = resolve(platform, args.sandbox)
        if args.command_id is not None:
            command = platform.get_command(args.command_id)
            if command.get("sandbox_id") not in (None, sandbox):
                raise NotFound(f"command {args.command_id} is not one of {sandbox}'s")
            sys.stdout.write(command.get("stdout") or "")
            sys.stderr.write(command.get("stderr") or "")
            err(f"[{command['status']}, exit code {command.get('exit_code')}]")
            return 0
        rows = [
            [
                str(c["id"]),
                c["status"],
                _text(c.get("exit_code")),
                f"{c['duration_seconds']:.1f}s" if c.get("duration_seconds") is not None else "-",
                ("bg " if c.get("background") else "") + c["command"].replace("\n", " ")[:70],
            ]
            for c in platform.list_commands(sandbox, limit=args.limit)
        ]
    _table(["ID", "STATUS", "EXIT", "TIME", "COMMAND"], rows)
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    with connect() as platform:
        sandbox = resolve(platform, args.sandbox)
        if args.start:
            job = platform.start_background(sandbox, args.start)
            print(job["id"])
            return 0
        if args.job_id is None:
            rows = [
                [str(c["id"]), c["status"], _text(c.get("exit_code")), c["command"][:70]]
                for c in platform.list_commands(sandbox, limit=200)
                if c.get("background")
            ]
            _table(["ID", "STATUS", "EXIT", "COMMAND"], rows)
            return 0
        if args.cancel:
            check = platform.cancel_background(sandbox, args.job_id)
        else:
            check = platform.check_background(sandbox, args.job_id, tail_lines=args.tail)
    sys.stdout.write(check.get("output") or "")
    err(f"[job {check['id']}: {check['status']}, exit code {_text(check.get('exit_code'))}]")
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    from sandhub.mcp_local import main as serve  # only this command needs the MCP server

    return int(serve(args.arguments) or 0)


def _rest_of(whole: str, shown: str, truncated: bool, out: Any) -> None:
    """The platform streams a command's output up to a cap: write what the result has beyond
    what was shown live (or say that the live output had gaps)."""
    if whole.startswith(shown):
        out.write(whole[len(shown) :])
        out.flush()
    elif truncated:
        err("sandhub: the output was longer than the platform keeps (head and tail are kept)")
    else:
        err("sandhub: some live output was cut short; the result's output follows")
        out.write(whole)
        out.flush()


# --- output --------------------------------------------------------------------------------


def _summary(report: SyncReport, dry_run: bool, verbose: bool) -> None:
    if dry_run or verbose:
        prefix = "would send" if dry_run else "sent"
        for path in report.sent:
            print(f"{prefix}: {path}")
        for path in report.deleted:
            print(f"{'would delete' if dry_run else 'deleted'}: {path}")
    verb = "would send" if dry_run else "sent"
    err(
        f"{verb} {len(report.sent)} entries ({report.bytes} bytes), "
        f"{'would delete' if dry_run else 'deleted'} {len(report.deleted)}, "
        f"{report.unchanged} unchanged"
    )


def _table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print(
            "  ".join(
                str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)
            ).rstrip()
        )


def _text(value: object) -> str:
    return "-" if value is None else str(value)


def _pair(item: str) -> tuple[str, str]:
    name, equals, value = item.partition("=")
    if not equals or not name:
        raise UsageError(f"--env wants NAME=VALUE, not {item!r}")
    return name, value


# --- entry point ---------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["mcp"]:
        # The server parses its own options: argparse hands a REMAINDER that starts with an
        # option (`mcp --root DIR`) back as "unrecognized arguments".
        return cmd_mcp(argparse.Namespace(arguments=words[1:]))
    args = build_parser(__version__).parse_args(words)
    handler = globals()[f"cmd_{args.command_name}"]
    try:
        return int(handler(args))
    except UsageError as exc:
        err(f"sandhub: {exc}")
        return 2
    except (ApiError, NotFound, config.ConfigError, TransferError) as exc:
        err(f"sandhub: {exc}")
        return 1
    except OSError as exc:
        err(f"sandhub: {exc.filename or ''}{': ' if exc.filename else ''}{exc.strerror or exc}")
        return 1
    except KeyboardInterrupt:
        err("sandhub: interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
