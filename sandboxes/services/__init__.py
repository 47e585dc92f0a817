"""The one API every interface (web, REST, MCP, admin, tasks) calls.

Each function takes the acting principal first, then: authorizes (the sandbox belongs to the
principal's team, the role allows it, quotas hold), calls the host's backend, persists
history (one CommandExecution per command) and leaves one AuditLog row (the `audited`
decorator), and returns a plain result object (sandboxes/contract/results.py). Another
team's sandbox is "not found".

Split by topic: sandboxes, lifecycle (pause, resume, stop; waking resumes on the way of a
call), lifetime, commands, background (+ jobs), files, archives, links
(file links; access_links: the rows of file links and preview tokens, listed and revoked),
sync (+ its tar streams), previews (+ the proxy's access and addresses), hosts (+ housekeeping
runs), team, selection, workflows (run_tests, run_once) and snapshots (+ starting a sandbox
from one: snapshot_restore);
common.py holds what they all do the same way. Interfaces import this package and nothing
below it (import-linter checks it).
"""

from hosts.backends.base import PortStream  # the proxy's stream type, without the backends
from hosts.backends.stdin import StdinClosed, StdinPipe  # run_command's input as it comes
from sandboxes.services.access_links import (
    DEFAULT_TOKEN_SECONDS,
    VIEWER_TOKEN_SECONDS,
    list_links,
    revoke_link,
)
from sandboxes.services.archives import open_archive_stream
from sandboxes.services.background import (
    BACKGROUND_TAIL_BYTES,
    MAX_BACKGROUND_PER_SANDBOX,
    MAX_TAIL_LINES,
    background_tick,
    cancel_background,
    check_background,
    start_background,
)
from sandboxes.services.command_kill import kill_command
from sandboxes.services.commands import (
    get_command,
    install_packages,
    list_commands,
    run_command,
    run_python,
)
from sandboxes.services.common import decode_output
from sandboxes.services.egress import egress_spec, get_team_egress, network_log, set_team_egress
from sandboxes.services.egress_process import egress_proxy, run_egress_proxy
from sandboxes.services.egress_secrets import add_secret, delete_secret, list_secrets
from sandboxes.services.egress_source import DatabasePolicySource
from sandboxes.services.file_ops import delete_path, make_directory, rename_path
from sandboxes.services.files import (
    READ_FILE_MAX_BYTES,
    UploadSource,
    download_files,
    list_files,
    open_file_stream,
    read_file,
    upload_files,
    write_file,
)
from sandboxes.services.history import history_command, list_deleted_sandboxes, sandbox_history
from sandboxes.services.hostkeys import confirm_host_key, fetch_host_key
from sandboxes.services.hosts import (
    list_hosts,
    probe_all_hosts,
    probe_host,
    reconcile_hosts,
    refill_warm_pools,
    set_host_draining,
    sweep_expired_and_idle,
)
from sandboxes.services.hostsetup import LoginSecret, add_host, read_host_key
from sandboxes.services.lifecycle import pause_sandbox, resume_sandbox, stop_sandbox
from sandboxes.services.lifetime import (
    extend_sandbox,
    extendable_minutes,
    latest_expiry,
    set_sandbox_timeout,
)
from sandboxes.services.links import (
    FileLink,
    LinkedFile,
    create_file_link,
    file_link_url,
    open_file_link,
)
from sandboxes.services.masking import mask_secrets
from sandboxes.services.previews import (
    DEFAULT_WAIT_SECONDS,
    MAX_WAIT_SECONDS,
    DeployFailed,
    deploy_app,
    get_preview_url,
    list_previews,
    stop_app,
)
from sandboxes.services.previews_access import (
    PreviewGrant,
    PreviewRequest,
    authorize_preview,
    open_preview,
    open_preview_stream,
    record_preview_activity,
)
from sandboxes.services.previews_tokens import (
    MAX_TOKEN_SECONDS,
    PREVIEW_COOKIE,
    PREVIEW_TOKEN_PARAM,
    parse_preview_host,
    preview_url,
)
from sandboxes.services.sandbox_search import search_sandboxes
from sandboxes.services.sandboxes import (
    create_sandbox,
    delete_sandbox,
    get_sandbox,
    list_sandboxes,
    rename_sandbox,
)
from sandboxes.services.selection import get_active_sandbox, select_sandbox
from sandboxes.services.shells import MAX_STDIN_BYTES, close_session, list_sessions  # noqa: I001
from sandboxes.services.snapshots import (
    delete_snapshot,
    fork_sandbox,
    get_snapshot,
    list_snapshots,
    snapshot_sandbox,
)
from sandboxes.services.sync import (
    MANIFEST_MAX,
    MAX_PATHS,
    open_sync_download,
    sync_delete,
    sync_upload,
    tree_manifest,
)
from sandboxes.services.synctar import TooLarge
from sandboxes.services.terminals import (  # noqa: I001 - terminals and shell sessions
    TerminalStream,
    attach_terminal,
    close_terminal,
    get_terminal,
    list_terminals,
    open_terminal,
    terminal_gone,
    terminal_seen,
)
from sandboxes.services.usage import get_host_metrics, get_sandbox_metrics, sample_all_usage
from sandboxes.services.workflows import run_once, run_tests

__all__ = [
    "StdinClosed",
    "StdinPipe",
    "kill_command",
    "DatabasePolicySource",
    "add_secret",
    "delete_secret",
    "egress_proxy",
    "egress_spec",
    "get_team_egress",
    "list_secrets",
    "mask_secrets",
    "network_log",
    "run_egress_proxy",
    "set_team_egress",
    "history_command",
    "list_deleted_sandboxes",
    "sandbox_history",
    "BACKGROUND_TAIL_BYTES",
    "DEFAULT_TOKEN_SECONDS",
    "DEFAULT_WAIT_SECONDS",
    "MAX_TOKEN_SECONDS",
    "MAX_WAIT_SECONDS",
    "PREVIEW_COOKIE",
    "PREVIEW_TOKEN_PARAM",
    "DeployFailed",
    "PortStream",
    "PreviewGrant",
    "PreviewRequest",
    "authorize_preview",
    "open_preview",
    "deploy_app",
    "get_preview_url",
    "list_previews",
    "open_preview_stream",
    "parse_preview_host",
    "preview_url",
    "record_preview_activity",
    "stop_app",
    "MAX_BACKGROUND_PER_SANDBOX",
    "MAX_TAIL_LINES",
    "READ_FILE_MAX_BYTES",
    "FileLink",
    "LinkedFile",
    "background_tick",
    "cancel_background",
    "check_background",
    "create_file_link",
    "file_link_url",
    "list_links",
    "revoke_link",
    "VIEWER_TOKEN_SECONDS",
    "create_sandbox",
    "decode_output",
    "delete_sandbox",
    "delete_path",
    "download_files",
    "extend_sandbox",
    "set_sandbox_timeout",
    "extendable_minutes",
    "get_active_sandbox",
    "get_command",
    "get_sandbox",
    "install_packages",
    "latest_expiry",
    "list_commands",
    "list_files",
    "make_directory",
    "list_hosts",
    "fetch_host_key",
    "confirm_host_key",
    "LoginSecret",
    "add_host",
    "read_host_key",
    "list_sandboxes",
    "open_archive_stream",
    "open_file_link",
    "open_file_stream",
    "probe_all_hosts",
    "probe_host",
    "read_file",
    "reconcile_hosts",
    "refill_warm_pools",
    "rename_path",
    "rename_sandbox",
    "run_command",
    "search_sandboxes",
    "run_once",
    "run_python",
    "run_tests",
    "select_sandbox",
    "set_host_draining",
    "start_background",
    "sweep_expired_and_idle",
    "UploadSource",
    "upload_files",
    "write_file",
    "MANIFEST_MAX",
    "MAX_PATHS",
    "TooLarge",
    "open_sync_download",
    "pause_sandbox",
    "resume_sandbox",
    "stop_sandbox",
    "sync_delete",
    "sync_upload",
    "tree_manifest",
    "delete_snapshot",
    "fork_sandbox",
    "get_snapshot",
    "list_snapshots",
    "snapshot_sandbox",
    "get_host_metrics",
    "get_sandbox_metrics",
    "sample_all_usage",
    "MAX_STDIN_BYTES",
    "TerminalStream",
    "attach_terminal",
    "close_session",
    "close_terminal",
    "get_terminal",
    "list_sessions",
    "list_terminals",
    "open_terminal",
    "terminal_gone",
    "terminal_seen",
]
