"""The product: sandboxes, the history of every command run in them, their previews, and the
links (file links, preview tokens) that open a part of one without a session. One module a
topic; everything is named here, where Django and the rest of the code find it."""

from sandboxes.models.commands import FINISHED_COMMAND_STATUSES, CommandExecution, CommandStatus
from sandboxes.models.ids import new_link_id, new_pool_id, new_sandbox_id
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

__all__ = [
    "ALLOWED_TRANSITIONS",
    "CHANGING_STATUSES",
    "FINISHED_COMMAND_STATUSES",
    "KEPT_STATUSES",
    "LIVE_STATUSES",
    "PAUSED_STATUSES",
    "RESUMABLE_STATUSES",
    "SERVED_STATUSES",
    "STOPPED_STATUSES",
    "AccessLink",
    "AccessLinkQuerySet",
    "CommandExecution",
    "CommandStatus",
    "InvalidTransition",
    "LinkKind",
    "Preview",
    "PreviewQuerySet",
    "S",
    "Sandbox",
    "SandboxQuerySet",
    "SandboxStatus",
    "WarmContainer",
    "WarmContainerStatus",
    "new_link_id",
    "new_pool_id",
    "new_sandbox_id",
]
