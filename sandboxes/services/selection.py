"""The sandbox an API key uses when a call names none (MCP's select_sandbox / sandbox_id
omitted). It is stored on the key's row, not in a connection, so any web process can answer
any request and the choice outlasts the connection."""

from __future__ import annotations

from sandboxes.contract.errors import NotFound
from sandboxes.contract.results import SandboxInfo
from sandboxes.services.sandboxes import get_sandbox
from sandboxes.services.workflows import unaudited
from tenants import apikeys
from tenants.auditing import AUDIT_VIEW, audited, current
from tenants.models import ApiKey
from tenants.principal import Principal


def _key(principal: Principal, key_id: int) -> ApiKey:
    """The principal's own key: a key of someone else is not found, like any other object."""
    key = ApiKey.objects.filter(pk=key_id, user=principal.user, team=principal.team).first()
    if key is None:
        raise NotFound(f"API key {key_id} not found")
    return key


# Recorded as "sandbox.get", the look-up it is (and has always been recorded as); the
# details say what was selected.
@audited("sandbox.get", "sandbox", kind=AUDIT_VIEW)
def select_sandbox(principal: Principal, key_id: int, sandbox_id: str | None) -> SandboxInfo | None:
    """Make a sandbox the key's selected one (it must be one the principal may see), or
    clear the selection with None."""
    key = _key(principal, key_id)
    if sandbox_id is None:
        apikeys.select_sandbox(key, "")
        current().details["selected"] = None
        return None
    info = unaudited(get_sandbox)(principal, sandbox_id)
    apikeys.select_sandbox(key, info.id)
    current().details["selected"] = info.id
    return info


def get_active_sandbox(principal: Principal, key_id: int) -> SandboxInfo | None:
    """The key's selected sandbox; None when none is, or when it is gone (the selection is
    dropped then). One audit row either way: the look-up's, or "sandbox.active"."""
    key = _key(principal, key_id)
    selected = key.selected_sandbox
    if not selected:
        return _nothing_selected(principal)
    try:
        return get_sandbox(principal, selected)
    except NotFound:
        apikeys.forget_sandbox(key, selected)
        return None


@audited("sandbox.active", "sandbox", kind=AUDIT_VIEW)
def _nothing_selected(principal: Principal) -> None:
    """No sandbox to look up, yet the call is on record like every other one."""
    return None


def remember_created(principal: Principal, key_id: int, sandbox_id: str) -> None:
    """Select a sandbox the principal has just created. Not audited on its own: part of the
    creation, whose row names the sandbox."""
    apikeys.select_sandbox(_key(principal, key_id), sandbox_id)


def forget_deleted(principal: Principal, key_id: int, sandbox_id: str) -> None:
    """Drop the selection if it names a sandbox just deleted. Not audited on its own: part of
    the deletion, whose row names the sandbox."""
    apikeys.forget_sandbox(_key(principal, key_id), sandbox_id)
