"""Identity and access: teams (the tenant, with quotas), memberships, the audit log."""

from __future__ import annotations

import re

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    MEMBER = "member", "Member"
    VIEWER = "viewer", "Viewer"


# Roles that may change things (create, run, write, delete); a viewer only reads.
WRITE_ROLES = frozenset({Role.OWNER, Role.ADMIN, Role.MEMBER})


DEFAULT_PREVIEW_PORTS = "1024-65535"
_PORT_RANGE = re.compile(r"^([0-9]{1,5})(?:\s*-\s*([0-9]{1,5}))?$")


def parse_port_ranges(text: str) -> list[tuple[int, int]]:
    """Ports written as "1024-65535" or "3000, 8000-8100", as inclusive (low, high) ranges;
    ValueError says what is wrong. Empty text allows no port at all."""
    ranges = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        match = _PORT_RANGE.match(part)
        if match is None:
            raise ValueError(f"{part!r} is not a port or a range of ports like 8000-8100")
        first, last = int(match[1]), int(match[2] or match[1])
        if not 1 <= first <= last <= 65535:
            raise ValueError(f"{part!r}: ports are 1 to 65535, the lower one first")
        ranges.append((first, last))
    return ranges


def validate_port_ranges(text: str) -> None:
    try:
        parse_port_ranges(text)
    except ValueError as exc:
        raise ValidationError(str(exc)) from exc


class Channel(models.TextChoices):
    WEB = "web", "Web"
    API = "api", "REST API"
    MCP = "mcp", "MCP"
    E2B = "e2b", "E2B API"  # E2B's SDKs, through the E2B-compatible endpoints (e2b_compat/)
    ADMIN = "admin", "Admin"
    SYSTEM = "system", "System"


class EgressMode(models.TextChoices):
    """How a sandbox reaches the network (issue 27): not at all, only the names of an
    allow-list, or the public internet (never private ranges unless an admin allows them).
    Ordered: a team's maximum allows its own mode and those before it."""

    OFF = "off", "Off"
    ALLOWLIST = "allowlist", "Allow-list only"
    PUBLIC = "public", "Public internet"


EGRESS_MODE_ORDER = (EgressMode.OFF, EgressMode.ALLOWLIST, EgressMode.PUBLIC)


class IdleAction(models.TextChoices):
    """What the sweep does with a sandbox idle past the team's timeout, or past its lifetime."""

    DELETE = "delete", "Delete it"
    PAUSE = "pause", "Pause it (then stop, then delete, after the times below)"


class Team(models.Model):
    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200)
    max_running_sandboxes = models.PositiveIntegerField(default=5)
    max_cpus_per_sandbox = models.FloatField(default=2.0, validators=[MinValueValidator(0.1)])
    max_memory_mb_per_sandbox = models.PositiveIntegerField(
        default=2048, validators=[MinValueValidator(16)]
    )
    # Each sandbox's /workspace is a filesystem of this size where the host supports it
    # (docs/security.md): a full disk stops the sandbox, not the host.
    max_disk_mb_per_sandbox = models.PositiveIntegerField(
        default=5120, validators=[MinValueValidator(64)]
    )
    # Snapshots (sandboxes.services.snapshots) hold a sandbox's files on a host's disk until
    # deleted: how many the team keeps, and how much disk they take together.
    max_snapshots = models.PositiveIntegerField(
        default=10, help_text="Snapshots the team may keep at once."
    )
    max_snapshot_mb = models.PositiveIntegerField(
        default=20480,
        help_text="Disk all the team's snapshots may take together, in MB (what they really "
        "take: a workspace's unwritten space costs nothing).",
    )
    default_lifetime_minutes = models.PositiveIntegerField(default=60)
    max_lifetime_minutes = models.PositiveIntegerField(default=24 * 60)
    idle_timeout_minutes = models.PositiveIntegerField(default=30)
    # The lifecycle past idleness (sandboxes/housekeeping/sweep.py, docs/lifecycle.md).
    idle_action = models.CharField(
        max_length=8,
        choices=IdleAction.choices,
        default=IdleAction.DELETE,
        help_text="What idleness and the end of a lifetime do to a running sandbox. With "
        "pause, a resume gives the sandbox a fresh lifetime.",
    )
    stop_paused_after_hours = models.PositiveIntegerField(
        default=24,
        help_text="A sandbox paused this long is stopped (its memory freed, its files kept). "
        "0: never.",
    )
    delete_stopped_after_days = models.PositiveIntegerField(
        default=7, help_text="A sandbox stopped this long is deleted. 0: never."
    )
    # Quotas by state: running ones hold CPU (max_running_sandboxes), paused ones memory,
    # stopped ones disk only.
    max_paused_sandboxes = models.PositiveIntegerField(
        default=5, help_text="Paused sandboxes at once (they keep their memory)."
    )
    max_paused_memory_mb = models.PositiveIntegerField(
        default=8192,
        help_text="The memory limits of the team's paused sandboxes, added up, at most this. "
        "0: no limit beyond the count.",
    )
    max_stopped_sandboxes = models.PositiveIntegerField(
        default=10, help_text="Stopped sandboxes at once (they keep their files)."
    )
    allow_network = models.BooleanField(
        default=False, help_text="Whether this team's sandboxes may reach the network."
    )
    # Egress (sandboxes/services/egress.py): the most a sandbox may ask for, the names its
    # allow-list mode may reach (rule strings: "pypi.org", "*.example.com:443"), and the
    # private ranges an admin lets it reach (refused by default, in every mode).
    egress_max_mode = models.CharField(
        max_length=10,
        choices=EgressMode.choices,
        default=EgressMode.PUBLIC,
        help_text="The most network a sandbox of this team may have (when network is allowed).",
    )
    egress_allowlist = models.JSONField(
        default=list,
        blank=True,
        help_text='Names an allow-list sandbox may reach: "pypi.org", "*.example.com:443".',
    )
    egress_allowed_ranges = models.JSONField(
        default=list,
        blank=True,
        help_text="Private address ranges (CIDR) the team's sandboxes may reach anyway.",
    )
    # Previews (sandboxes.services.previews): which ports of a sandbox may be reached through
    # the platform, how many at once, and whether a team admin may open one to everyone.
    allowed_preview_ports = models.CharField(
        max_length=200,
        default=DEFAULT_PREVIEW_PORTS,
        blank=True,
        validators=[validate_port_ranges],
        help_text="Ports of a sandbox that may be previewed: ports and ranges, e.g. "
        "'3000, 8000-8100'. Empty: none.",
    )
    max_previews_per_sandbox = models.PositiveIntegerField(
        default=5, help_text="Open previews per sandbox at once."
    )
    allow_public_previews = models.BooleanField(
        default=False,
        help_text="Whether the team's owners and admins may open a preview to anyone with "
        "its address (no sign-in, no token).",
    )
    audit_views = models.BooleanField(
        default=False,
        help_text="Also audit listings and views of metadata (sandboxes, commands, hosts, "
        "keys, members, files listed). Changes, reads of data (downloads, file links, "
        "previews) and refusals are always audited.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    def allows_preview_port(self, port: int) -> bool:
        try:
            ranges = parse_port_ranges(self.allowed_preview_ports)
        except ValueError:  # saved around the validator: allow nothing rather than guess
            return False
        return any(low <= port <= high for low, high in ranges)


class Membership(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="one_membership_per_team")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"

    @property
    def can_write(self) -> bool:
        return self.role in WRITE_ROLES


class AuditLogQuerySet(models.QuerySet):
    def update(self, **kwargs):  # noqa: ARG002 - append-only
        raise PermissionError("the audit log is append-only")

    def delete(self):
        raise PermissionError("the audit log is append-only")


class AuditKind(models.TextChoices):
    """What an audited action did: changed state, read data out of a sandbox, or only viewed
    metadata (audited when the team's audit_views is on, or when it was refused)."""

    CHANGE = "change", "Change"
    READ = "read", "Read of data"
    VIEW = "view", "View"


class AuditLog(models.Model):
    """One row per audited action on any channel. Written only by tenants.audit.record()."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.SET_NULL)
    channel = models.CharField(max_length=10, choices=Channel.choices)
    action = models.CharField(max_length=64)
    kind = models.CharField(
        max_length=8, choices=AuditKind.choices, default=AuditKind.CHANGE, db_index=True
    )
    target_type = models.CharField(max_length=64, blank=True)
    target_id = models.CharField(max_length=64, blank=True)
    source_address = models.GenericIPAddressField(null=True, blank=True)
    outcome = models.CharField(max_length=16, default="ok")
    details = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    objects = AuditLogQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["team", "created_at"], name="audit_team_time")]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.channel} {self.action}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise PermissionError("the audit log is append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise PermissionError("the audit log is append-only")


class ApiKeyScope(models.TextChoices):
    READ = "read", "Read"
    WRITE = "write", "Write"
    ADMIN = "admin", "Admin"


class ApiKey(models.Model):
    """A per-user secret for programs and agents, bound to one team.

    The key reads `shk_<prefix>_<secret>`: the prefix finds the row, only a hash of the secret
    is stored (tenants.apikeys makes, checks and revokes keys). A key never grants more than its
    user's current role in the team: services read the role afresh on every call.
    """

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys"
    )
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    secret_hash = models.CharField(max_length=64, editable=False)
    scopes = models.JSONField(default=list, help_text="Any of read, write, admin.")
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked = models.BooleanField(default=False)
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    last_used_address = models.GenericIPAddressField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"shk_{self.prefix}_… ({self.name or 'unnamed'})"

    def __repr__(self) -> str:  # never the hash
        return f"<ApiKey {self.pk} shk_{self.prefix} user={self.user_id} team={self.team_id}>"


class McpSession(models.Model):
    """One MCP session of a key: what its agent selected (select_sandbox), so that tools in the
    session may omit sandbox_id. Two agents with one key have two sessions, and neither sees
    the other's selection.

    The session id is handed out by the MCP endpoint (mcp_bridge/sessions.py) and only its
    SHA-256 is stored; rows are per key, so the same id presented with another key finds
    nothing. Stored here rather than in a web process, since any process answers any request.
    A row exists once something was selected, lives until expires_at (pushed forward as the
    session uses its selection) and is deleted when the client ends the session, or by the
    sweep once expired.
    """

    key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="mcp_sessions")
    digest = models.CharField(max_length=64, editable=False)
    selected_sandbox = models.CharField(max_length=32, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["key", "digest"], name="mcp_session_per_key")
        ]
        verbose_name = "MCP session"

    def __repr__(self) -> str:  # never the digest
        return f"<McpSession {self.pk} key={self.key_id} selected={self.selected_sandbox!r}>"
