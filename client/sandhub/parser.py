"""The `sandhub` command line's arguments (cli.py runs them)."""

from __future__ import annotations

import argparse

EPILOG = """\
configuration: SANDHUB_URL and SANDHUB_API_KEY, or `sandhub login`.
remote paths: SANDBOX:PATH (an id like sb_... or a name; a relative PATH is under /workspace).
"""


def build_parser(version: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sandhub",
        description="Work with Sandhub sandboxes from your machine.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"sandhub {version}")
    commands = parser.add_subparsers(dest="command_name", required=True, metavar="COMMAND")

    login = commands.add_parser("login", help="store the platform's URL and your API key")
    login.add_argument("--url", help="e.g. http://127.0.0.1:8000 (asked when missing)")
    login.add_argument("--key", help="an API key, shk_... (asked when missing; or SANDHUB_API_KEY)")

    boxes = commands.add_parser("sandboxes", help="list, create or delete sandboxes")
    actions = boxes.add_subparsers(dest="action", metavar="ACTION")
    actions.add_parser("ls", help="your team's sandboxes (the default)")
    create = actions.add_parser("create", help="a new sandbox; prints its id")
    create.add_argument("--name")
    create.add_argument("--image")
    create.add_argument("--cpus", type=float)
    create.add_argument("--memory-mb", type=int)
    create.add_argument("--disk-mb", type=int)
    create.add_argument("--lifetime-minutes", type=int)
    create.add_argument("--network", action=argparse.BooleanOptionalAction, default=None)
    create.add_argument("--env", action="append", metavar="NAME=VALUE")
    remove = actions.add_parser("rm", help="delete sandboxes and their files")
    remove.add_argument("ids", nargs="+", metavar="SANDBOX")

    run = commands.add_parser(
        "run",
        help="run a command in a sandbox, output live; exits with its exit code",
        usage="sandhub run [--cwd DIR] [--timeout S] [--env NAME=VALUE] SANDBOX -- COMMAND...",
    )
    run.add_argument("--cwd", help="working directory (default /workspace)")
    run.add_argument("--timeout", type=float, help="seconds; killed after (exit code 124)")
    run.add_argument("--env", action="append", metavar="NAME=VALUE")
    run.add_argument("sandbox", metavar="SANDBOX")
    run.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND")

    cp = commands.add_parser("cp", help="copy a file or directory to or from a sandbox")
    cp.add_argument("source", metavar="SRC", help="a local path or SANDBOX:PATH")
    cp.add_argument("target", metavar="DST", help="a local path or SANDBOX:PATH")
    cp.add_argument("--exclude", action="append", default=[], metavar="PATTERN")

    sync = commands.add_parser(
        "sync",
        help="sync a directory to or from a sandbox (only what changed)",
        description="sandhub sync LOCAL SANDBOX:PATH, or sandhub sync SANDBOX:PATH LOCAL. "
        "Files differing in size, mtime or mode are sent in one tar stream; .git is never "
        "synced and .gitignore rules apply unless --no-gitignore.",
    )
    sync.add_argument("source", metavar="SRC")
    sync.add_argument("target", metavar="DST")
    sync.add_argument(
        "--exclude", action="append", default=[], metavar="PATTERN", help="gitignore-style"
    )
    sync.add_argument(
        "--gitignore",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="honour .gitignore files (default: yes)",
    )
    sync.add_argument("--delete", action="store_true", help="remove what only DST has")
    sync.add_argument("--dry-run", action="store_true", help="say what would happen, do nothing")
    sync.add_argument("-v", "--verbose", action="store_true", help="list what was sent")

    logs = commands.add_parser("logs", help="a sandbox's command history, or one command")
    logs.add_argument("sandbox", metavar="SANDBOX")
    logs.add_argument("command_id", nargs="?", type=int, metavar="COMMAND_ID")
    logs.add_argument("-n", "--limit", type=int, default=20)

    jobs = commands.add_parser("jobs", help="background jobs: list, check, start, cancel")
    jobs.add_argument("sandbox", metavar="SANDBOX")
    jobs.add_argument("job_id", nargs="?", type=int, metavar="JOB_ID")
    jobs.add_argument("--start", metavar="COMMAND", help="start COMMAND in the background")
    jobs.add_argument("--cancel", action="store_true", help="cancel JOB_ID")
    jobs.add_argument("--tail", type=int, default=20, help="lines of output to show")

    mcp = commands.add_parser(
        "mcp",
        help="a local MCP server (stdio) for coding agents: platform tools plus local sync",
        add_help=False,  # its own options (--root ...) are its parser's
    )
    mcp.add_argument("arguments", nargs=argparse.REMAINDER)
    return parser
