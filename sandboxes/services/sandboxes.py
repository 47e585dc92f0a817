"""Sandboxes: create (placement, quotas, provisioning), list, get, delete, rename."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from dbkit import writes
from hosts.backends.base import BackendError, SandboxGone, SandboxSpec
from hosts.backends.gpus import gpu_environment
from hosts.models import Image
from sandboxes.contract.errors import (
    BackendFailure,
    Conflict,
    InvalidInput,
    QuotaExceeded,
)
from sandboxes.contract.results import SandboxInfo
from sandboxes.housekeeping import pool
from sandboxes.models import (
    CHANGING_STATUSES,
    Preview,
    Sandbox,
    SandboxStatus,
    Snapshot,
    WarmContainer,
)
from sandboxes.policy import access, placement, validation
from sandboxes.policy.access import READ, WRITE
from sandboxes.policy.limits import (
    DEFAULT_CPUS,
    DEFAULT_MEMORY_MB,
    DEFAULT_PIDS_LIMIT,
    MIN_MEMORY_MB,
)
from sandboxes.services import egress, snapshot_restore
from sandboxes.services.common import backend_of
from sandboxes.services.create_requests import FAILED, CreateRequest
from tenants.auditing import AUDIT_VIEW, audited, change, change_with, current
from tenants.models import Team
from tenants.principal import Principal
from tenants.ratelimits import rate_limited

# Smallest /workspace a sandbox may ask for: room for a checkout and the filesystem's own
# metadata (the team quota's own minimum is the same).
MIN_DISK_MB = 64


# Limited per key or user and per address (tenants/ratelimits.py), platform admins aside.
@rate_limited("sandbox.create")
@audited("sandbox.create", "sandbox")
def create_sandbox(
    principal: Principal,
    *,
    image: str | None = None,
    name: str | None = None,
    cpus: float | None = None,
    memory_mb: int | None = None,
    env: dict[str, str] | None = None,
    lifetime_minutes: int | None = None,
    network: bool | str | None = None,
    disk_mb: int | None = None,
    gpus: int | None = None,
    snapshot: str | None = None,
    request_id: str | None = None,
    allow: list[str] | None = None,
    metadata: dict[str, str] | None = None,
) -> SandboxInfo:
    """Create a sandbox on the idlest host with room and wait until it is running.

    disk_mb: size of /workspace, at most the team's quota; the quota when not given.
    gpus: GPUs of its own, on the host whose freest GPUs are freest; every command sees
    them (and only them) as CUDA_VISIBLE_DEVICES.
    snapshot: a snapshot's id: the sandbox starts with its files, on a host of its kind,
    with its image and limits where these are not given (snapshot_restore.py).
    request_id: the client's id for this request: a retry with it gets the same sandbox
    (create_requests.py).
    network: True (public if the team allows it, else allowlist), False (off, the default)
    or a mode by name: "off", "allowlist", "public" (egress.py), within the team's policy.
    allow: an allowlist sandbox's own list, narrower than its team's (default: the team's).
    metadata: labels (string keys and values, validation.metadata) lists can filter by.
    """
    arguments = {k: v for k, v in locals().items() if k not in ("principal", "request_id")}
    access.require(principal, WRITE, "create sandboxes")
    team = _team(principal)
    request = CreateRequest.of(team, request_id, arguments)
    if request is not None and (earlier := request.made()) is not None:
        return _retried(request, earlier)
    # --- from a snapshot: its image and limits unless given (another team's: not found).
    source = None if snapshot is None else snapshot_restore.ready_snapshot(principal, snapshot)
    if source is not None:
        asked = {"image": image, "cpus": cpus, "memory_mb": memory_mb, "network": network}
        inherited = snapshot_restore.inherited(
            source, {**asked, "disk_mb": disk_mb, "allow": allow}
        )
        image, cpus, memory_mb = inherited["image"], inherited["cpus"], inherited["memory_mb"]
        network, disk_mb, allow = inherited["network"], inherited["disk_mb"], inherited["allow"]
    chosen_image = _image_for(team, image)
    limits = {**_limits(team, cpus, memory_mb, network, allow), "disk_mb": _disk_mb(team, disk_mb)}
    lifetime = _lifetime(team, lifetime_minutes)
    spec_env = validation.env(env)
    sandbox_name = validation.name(name)
    labels = validation.metadata(metadata)
    gpu_count = _gpu_count(gpus)

    with transaction.atomic():
        # Lock the team row so concurrent creations cannot both pass the quota check.
        team = Team.objects.select_for_update().get(pk=team.pk)
        # Concurrent tries of one request queue on that lock too: the later ones find the
        # first's sandbox here.
        earlier = request.made() if request is not None else None
        if earlier is None:
            _check_running_quota(team)
            chosen = placement.choose_host(
                team,
                gpu_count,
                kind=source.host_kind if source else None,
                prefer=source.host_id if source else None,
            )
            host = chosen.host
            if host.gpu_count:  # a sandbox sees its own GPUs, and none of the host's others
                spec_env = {**spec_env, **gpu_environment(chosen.gpus)}
            sandbox = Sandbox.objects.create(
                team=team,
                owner=principal.user,
                host=host,
                image=chosen_image,
                name=sandbox_name,
                env=spec_env,
                metadata=labels,
                gpus=list(chosen.gpus),
                expires_at=timezone.now() + timedelta(minutes=lifetime),
                status=SandboxStatus.STARTING,
                status_changed_at=timezone.now(),
                egress_token=egress.new_token(limits["egress_mode"]),
                **(request.fields() if request is not None else {}),
                **limits,
            )
            # In the same transaction: one write of the database's per create, not two.
            # A snapshot's sandbox starts from its files, not from a pool member.
            member = pool.take_member(sandbox) if source is None else None
    if request is not None and earlier is not None:
        return _retried(request, earlier)
    current().target("sandbox", sandbox.public_id)
    current().details.update({"image": chosen_image.name, "host": host.name, **limits})
    if request is not None:
        current().details["request_id"] = request.request_id
    if chosen.gpus:
        current().details["gpus"] = list(chosen.gpus)
    _provision(sandbox, member, source)
    return SandboxInfo.from_model(sandbox)


def _retried(request: CreateRequest, earlier: Sandbox) -> SandboxInfo:
    """A retry's answer: the sandbox its first try made (audited as the same request)."""
    current().target("sandbox", earlier.public_id)
    current().details.update({"request_id": request.request_id, "retry": True})
    return SandboxInfo.from_model(request.answer(earlier))


# More than any machine holds: a larger number is a mistake, told as such.
MAX_GPUS = 16


def _gpu_count(gpus: Any) -> int:
    if gpus is None:
        return 0
    validation.positive_int(gpus, "gpus", minimum=0, maximum=MAX_GPUS)
    return int(gpus)


def _team(principal: Principal) -> Team:
    if principal.team is None:
        raise InvalidInput("a team is needed to create a sandbox")
    return principal.team


def _image_for(team: Team, name: str | None) -> Image:
    if name is None or name == "":
        chosen = Image.objects.filter(is_default=True).first()
        if chosen is None:
            raise InvalidInput("no default image is configured; name an image")
    else:
        if not isinstance(name, str):
            raise InvalidInput("image must be a string")
        chosen = Image.objects.filter(name=name).first()
        if chosen is None or not chosen.allowed_for(team):
            available = ", ".join(i.name for i in Image.objects.all() if i.allowed_for(team))
            raise InvalidInput(f"unknown image {name!r}; available: {available or 'none'}")
    return chosen


def _limits(team: Team, cpus: Any, memory_mb: Any, network: Any, allow: Any) -> dict[str, Any]:
    cpus = min(DEFAULT_CPUS, team.max_cpus_per_sandbox) if cpus is None else cpus
    if isinstance(cpus, bool) or not isinstance(cpus, int | float) or cpus <= 0:
        raise InvalidInput("cpus must be a positive number")
    if cpus > team.max_cpus_per_sandbox:
        raise QuotaExceeded(f"team quota: at most {team.max_cpus_per_sandbox:g} cpus per sandbox")
    memory_mb = (
        min(DEFAULT_MEMORY_MB, team.max_memory_mb_per_sandbox) if memory_mb is None else memory_mb
    )
    validation.positive_int(memory_mb, "memory_mb", minimum=MIN_MEMORY_MB)
    if memory_mb > team.max_memory_mb_per_sandbox:
        raise QuotaExceeded(
            f"team quota: at most {team.max_memory_mb_per_sandbox} MB of memory per sandbox"
        )
    mode = egress.choose_mode(team, network)
    return {
        "cpus": float(cpus),
        "memory_mb": memory_mb,
        "pids_limit": DEFAULT_PIDS_LIMIT,
        "network": mode != egress.OFF,
        "egress_mode": mode,
        "egress_allow": egress.effective_allow(team, mode, allow),
    }


def _disk_mb(team: Team, disk_mb: Any) -> int:
    if disk_mb is None:
        return team.max_disk_mb_per_sandbox
    validation.positive_int(disk_mb, "disk_mb", minimum=MIN_DISK_MB)
    if disk_mb > team.max_disk_mb_per_sandbox:
        raise QuotaExceeded(
            f"team quota: at most {team.max_disk_mb_per_sandbox} MB of disk per sandbox"
        )
    return int(disk_mb)


def _lifetime(team: Team, minutes: Any) -> int:
    if minutes is None:
        return min(team.default_lifetime_minutes, team.max_lifetime_minutes)
    validation.positive_int(minutes, "lifetime_minutes", minimum=1)
    if minutes > team.max_lifetime_minutes:
        raise QuotaExceeded(
            f"team quota: sandboxes live at most {team.max_lifetime_minutes} minutes"
        )
    return minutes


def _check_running_quota(team: Team) -> None:
    running = Sandbox.objects.filter(team=team).live().count()
    if running >= team.max_running_sandboxes:
        raise QuotaExceeded(
            f"team quota: at most {team.max_running_sandboxes} running sandboxes "
            f"({running} running); delete one first"
        )


def _spec(sandbox: Sandbox) -> SandboxSpec:
    return SandboxSpec(
        sandbox_id=sandbox.public_id,
        image_reference=sandbox.image.reference,
        cpus=sandbox.cpus,
        memory_mb=sandbox.memory_mb,
        pids_limit=sandbox.pids_limit,
        network=sandbox.egress_mode != egress.OFF,
        # Secrets' placeholders (never their values), under what the sandbox was given.
        env={**egress.sandbox_environment(sandbox), **sandbox.env},
        labels={"org.sandhub.team": sandbox.team.slug},
        disk_mb=sandbox.disk_mb,
        gpus=tuple(sandbox.gpus),
        egress=egress.egress_spec(sandbox),
    )


def _provision(
    sandbox: Sandbox, member: WarmContainer | None, snapshot: Snapshot | None = None
) -> None:
    """Start the sandbox on its host (from the snapshot's files when given, else from the
    pool member claimed for it, if any); on failure leave nothing behind and say why."""
    try:
        spec = _spec(sandbox)
        if snapshot is not None:
            sandbox.backend_state = snapshot_restore.provision(sandbox, spec, snapshot)
        else:
            # The pool member when there is one (sandboxes/housekeeping/pool.py), else afresh.
            sandbox.backend_state = pool.provision_sandbox(sandbox, spec, member)
    except BackendError as exc:
        # The backend removed what it had made; the row stays only as history, and lets go
        # of its request id: a retry of the request tries again.
        sandbox.transition(SandboxStatus.ERROR, f"{FAILED}: {exc}")
        sandbox.transition(SandboxStatus.STOPPING)
        sandbox.transition(SandboxStatus.DELETED, f"{FAILED}: {exc}")
        sandbox.request_id = None
        sandbox.save()
        raise BackendFailure(f"could not start the sandbox on host {sandbox.host}: {exc}") from exc
    sandbox.transition(SandboxStatus.RUNNING)
    sandbox.last_activity_at = timezone.now()
    # Running, and its audit row, in one transaction of two compiled statements.
    running = ("status", "status_message", "started_at", "last_activity_at", "backend_state")
    change_with(
        writes.update(
            Sandbox.objects.filter(pk=sandbox.pk), {f: getattr(sandbox, f) for f in running}
        )
    )


@audited("sandbox.list", "sandbox", kind=AUDIT_VIEW)
def list_sandboxes(principal: Principal) -> list[SandboxInfo]:
    access.require(principal, READ, "list sandboxes")
    return [SandboxInfo.from_model(s) for s in access.sandboxes_of(principal)]


@audited("sandbox.get", "sandbox", kind=AUDIT_VIEW)
def get_sandbox(principal: Principal, sandbox_id: str) -> SandboxInfo:
    current().target("sandbox", sandbox_id)
    sandbox = access.get_sandbox(principal, sandbox_id, READ, "see sandboxes")
    return SandboxInfo.from_model(sandbox, egress=egress.egress_block(sandbox))


@audited("sandbox.delete", "sandbox")
def delete_sandbox(principal: Principal, sandbox_id: str) -> SandboxInfo:
    """Remove the sandbox and everything it stored; its history stays.

    Claimed with a compare-and-set on the status it was read in: a pause, resume or stop
    that got there first (or is under way) makes this a Conflict that changes nothing."""
    current().target("sandbox", sandbox_id)
    sandbox = access.get_sandbox(principal, sandbox_id, WRITE, "delete sandboxes")
    if sandbox.status in CHANGING_STATUSES:
        raise Conflict(f"sandbox {sandbox_id} is {sandbox.status} right now; delete it in a moment")
    if sandbox.status == SandboxStatus.PENDING:
        with change():
            _claim_for_delete(sandbox, SandboxStatus.DELETED)
        return SandboxInfo.from_model(sandbox)
    _claim_for_delete(sandbox, SandboxStatus.STOPPING)
    # Its previews close with it (the proxy serves only running sandboxes' anyway).
    Preview.objects.filter(sandbox=sandbox).stop("its sandbox was deleted")
    message = ""
    try:
        if sandbox.host and sandbox.backend_state:
            backend_of(sandbox).destroy(sandbox.backend_state)
    except SandboxGone as exc:
        # Already gone from its host: what deleting it was for. Lost on the way, then deleted.
        message = f"its container or directory was already gone: {exc}"
    except BackendError as exc:
        sandbox.transition(SandboxStatus.ERROR, f"delete failed: {exc}")
        sandbox.save(update_fields=["status", "status_message", "status_changed_at"])
        raise BackendFailure(f"could not delete sandbox {sandbox_id}: {exc}") from exc
    with change():  # deleted, and its audit row, in one transaction
        sandbox.transition(SandboxStatus.DELETED, message)
        sandbox.save()
    return SandboxInfo.from_model(sandbox)


def _claim_for_delete(sandbox: Sandbox, status: str) -> None:
    seen = sandbox.status
    if not sandbox.transition_if(status):
        now = Sandbox.objects.filter(pk=sandbox.pk).values_list("status", flat=True).first()
        raise Conflict(
            f"sandbox {sandbox.public_id} changed meanwhile ({seen}, now {now}); try again"
        )


@audited("sandbox.rename", "sandbox", atomic=True)
def rename_sandbox(principal: Principal, sandbox_id: str, name: str) -> SandboxInfo:
    current().target("sandbox", sandbox_id)
    new_name = validation.name(name)
    sandbox = access.get_sandbox(principal, sandbox_id, WRITE, "rename sandboxes")
    current().details.update({"from": sandbox.name, "to": new_name})
    sandbox.name = new_name
    sandbox.save(update_fields=["name"])
    return SandboxInfo.from_model(sandbox)
