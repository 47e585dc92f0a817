"""The product: sandboxes, the history of every command run in them, their previews, the
links (file links, preview tokens) that open a part of one without a session, and snapshots
(a sandbox's files kept under a name, to start new sandboxes from). One module a topic;
everything is named here, where Django and the rest of the code find it."""

from sandboxes.models.commands import FINISHED_COMMAND_STATUSES, CommandExecution, CommandStatus
from sandboxes.models.egress import EgressAuthority, EgressRefusal, EgressSecret
from sandboxes.models.ids import new_link_id, new_pool_id, new_sandbox_id, new_snapshot_id
from sandboxes.models.leases import LeaseEnd, ProcessKind, ProcessLease
from sandboxes.models.pool import WarmContainer, WarmContainerStatus
from sandboxes.models.previews import (
    AccessLink,
    AccessLinkQuerySet,
    LinkKind,
    Preview,
    PreviewQuerySet,
)
from sandboxes.models.sandbox import (
    ALLOWED_TRANSITIONS,
    CHANGING_STATUSES,
    KEPT_STATUSES,
    LIVE_STATUSES,
    PAUSED_STATUSES,
    RESUMABLE_STATUSES,
    SERVED_STATUSES,
    STOPPED_STATUSES,
    InvalidTransition,
    S,
    Sandbox,
    SandboxQuerySet,
    SandboxStatus,
)
from sandboxes.models.snapshots import (
    LIVE_SNAPSHOT_STATUSES,
    Snapshot,
    SnapshotQuerySet,
    SnapshotStatus,
)
from sandboxes.models.terminals import Terminal, TerminalKind, TerminalQuerySet
from sandboxes.models.usage import HostUsageSample, UsageSample

__all__ = [
    "ALLOWED_TRANSITIONS",
    "CHANGING_STATUSES",
    "FINISHED_COMMAND_STATUSES",
    "KEPT_STATUSES",
    "LIVE_SNAPSHOT_STATUSES",
    "LIVE_STATUSES",
    "PAUSED_STATUSES",
    "RESUMABLE_STATUSES",
    "SERVED_STATUSES",
    "STOPPED_STATUSES",
    "AccessLink",
    "AccessLinkQuerySet",
    "CommandExecution",
    "CommandStatus",
    "EgressAuthority",
    "EgressRefusal",
    "EgressSecret",
    "HostUsageSample",
    "InvalidTransition",
    "LeaseEnd",
    "LinkKind",
    "Preview",
    "PreviewQuerySet",
    "ProcessKind",
    "ProcessLease",
    "S",
    "Sandbox",
    "SandboxQuerySet",
    "SandboxStatus",
    "Snapshot",
    "SnapshotQuerySet",
    "SnapshotStatus",
    "UsageSample",
    "Terminal",
    "TerminalKind",
    "TerminalQuerySet",
    "WarmContainer",
    "WarmContainerStatus",
    "new_link_id",
    "new_pool_id",
    "new_sandbox_id",
    "new_snapshot_id",
]
