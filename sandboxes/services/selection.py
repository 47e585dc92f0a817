"""The sandbox an MCP session uses when a call names none (select_sandbox / sandbox_id omitted).

A selection belongs to one MCP session of one API key (tenants.models.McpSession), never to
the key: two agents sharing a key each select their own sandbox, and one agent's call without
sandbox_id never lands in the other's sandbox. It is stored in the database under the
session id the MCP endpoint handed out (mcp_bridge/sessions.py), so any web process answers
any request. A call without a session (MCP's 2026-07-28 protocol has none) selects nothing
and must name its sandbox.
"""

from __future__ import annotations

from sandboxes.contract.errors import InvalidInput, NotFound
from sandboxes.contract.results import SandboxInfo
from sandboxes.services.sandboxes import get_sandbox
from sandboxes.services.workflows import unaudited
from tenants import apikeys
from tenants.auditing import AUDIT_VIEW, audited, current
from tenants.models import ApiKey
from tenants.principal import Principal

NO_SESSION = (
    "this MCP connection has no session, so no sandbox can be selected for it: pass "
    "sandbox_id to every tool that acts on a sandbox (create_sandbox returned it; "
    "list_sandboxes shows them all). Selections belong to one MCP session, so that agents "
    "sharing an API key never act in each other's sandboxes; clients on the 2026-07-28 "
    "protocol have no sessions"
)


def _key(principal: Principal, key_id: int) -> ApiKey:
    """The principal's own key: a key of someone else is not found, like any other object."""
    key = ApiKey.objects.filter(pk=key_id, user=principal.user, team=principal.team).first()
    if key is None:
        raise NotFound(f"API key {key_id} not found")
    return key


# Recorded as "sandbox.get", the look-up it is (and has always been recorded as); the
# details say what was selected.
@audited("sandbox.get", "sandbox", kind=AUDIT_VIEW)
def select_sandbox(
    principal: Principal, key_id: int, session: str | None, sandbox_id: str | None
) -> SandboxInfo | None:
    """Make a sandbox (one the principal may see) the session's selection, or clear it with
    None. Without a session there is nothing to select in: InvalidInput says so."""
    key = _key(principal, key_id)
    info = unaudited(get_sandbox)(principal, sandbox_id) if sandbox_id is not None else None
    if session is None:
        raise InvalidInput(NO_SESSION)
    if info is None:
        apikeys.select_in_session(key.pk, session, "")
        current().details["selected"] = None
        return None
    apikeys.select_in_session(key.pk, session, info.id)
    current().details["selected"] = info.id
    return info


def get_active_sandbox(
    principal: Principal, key_id: int, session: str | None
) -> SandboxInfo | None:
    """The session's selected sandbox; None when there is no session, nothing is selected,
    or the sandbox is gone (the selection is dropped then). One audit row either way: the
    look-up's, or "sandbox.active"."""
    key = _key(principal, key_id)
    if session is None or not (selected := apikeys.session_selection(key.pk, session)):
        return _nothing_selected(principal)
    try:
        return get_sandbox(principal, selected)
    except NotFound:
        apikeys.forget_in_session(key.pk, session, selected)
        return None


@audited("sandbox.active", "sandbox", kind=AUDIT_VIEW)
def _nothing_selected(principal: Principal) -> None:
    """No sandbox to look up, yet the call is on record like every other one."""
    return None


def selected_sandbox(principal: Principal, key_id: int, session: str | None) -> str:
    """The id the session selected ("" when none, or no session). Not audited: a look-up
    for the call that uses it, whose own row names the sandbox."""
    if session is None:
        return ""
    return apikeys.session_selection(_key(principal, key_id).pk, session)


def remember_created(
    principal: Principal, key_id: int, session: str | None, sandbox_id: str
) -> bool:
    """Select a sandbox the principal has just created, if the call has a session; whether
    it was selected. Not audited on its own: part of the creation, whose row names it."""
    if session is None:
        return False
    apikeys.select_in_session(_key(principal, key_id).pk, session, sandbox_id)
    return True


def forget_deleted(principal: Principal, key_id: int, session: str | None, sandbox_id: str) -> None:
    """Drop the session's selection if it names a sandbox just deleted. Not audited on its
    own: part of the deletion, whose row names the sandbox."""
    if session is not None:
        apikeys.forget_in_session(_key(principal, key_id).pk, session, sandbox_id)


def end_session(principal: Principal, key_id: int, session: str) -> bool:
    """Forget what the session selected: its client ended it (HTTP DELETE). Not audited:
    ending a connection changes nothing of the team's; whether there was a selection."""
    return apikeys.end_session(_key(principal, key_id).pk, session)
