"""create_sandbox's request ids: a client's retry gets the sandbox its first try made.

A client (an agent whose connection dropped mid-call, a program retrying on a timeout) passes
its own id for the request. The sandbox keeps it, unique per team (the database's
constraint), with a digest of the request's arguments:

- the same id and the same arguments: the same sandbox, in the state it is in (deleted
  since, it says so). One still starting is waited for (up to START_WAIT seconds, then
  answered as it is), so a retry answers as the first call would have;
- the same id and other arguments: refused (Conflict), nothing made: the id names another
  request, and answering with a sandbox made to other specifications would be wrong;
- the first try failed to start its sandbox: its row let go of the id when it failed, so a
  retry makes a new one (a retry that was waiting for it gets the failure);
- ids are a team's own: another team's request with the same id is another request, and
  learns nothing about this one.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from typing import Any

from sandboxes.contract.errors import BackendFailure, Conflict, InvalidInput
from sandboxes.models import Sandbox, SandboxStatus
from tenants.models import Team

REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,99}")
START_WAIT = 120.0  # seconds a retry waits for the first try's sandbox to start
LOOK_EVERY = 0.05  # seconds between two looks at it meanwhile
FAILED = "provisioning failed"  # how a failed start's row begins its status message


@dataclass(frozen=True)
class CreateRequest:
    team: Team
    request_id: str
    digest: str

    @classmethod
    def of(cls, team: Team, request_id: Any, arguments: dict[str, Any]) -> CreateRequest | None:
        """The request, or None without an id; InvalidInput for an id that cannot be one."""
        if request_id is None:
            return None
        if not isinstance(request_id, str) or not REQUEST_ID.fullmatch(request_id):
            raise InvalidInput(
                "request_id must be 1 to 100 letters, digits and . _ : - (a UUID, say), "
                "starting with a letter or digit"
            )
        return cls(team, request_id, digest(arguments))

    def fields(self) -> dict[str, str]:
        """What the new sandbox's row keeps of the request."""
        return {"request_id": self.request_id, "request_digest": self.digest}

    def made(self) -> Sandbox | None:
        """The sandbox an earlier try of this request made, if any."""
        return (
            Sandbox.objects.select_related("host", "image")
            .filter(team=self.team, request_id=self.request_id)
            .first()
        )

    def answer(self, sandbox: Sandbox) -> Sandbox:
        """The earlier try's sandbox as this retry's answer: refused if the arguments differ;
        waited for while it starts."""
        if sandbox.request_digest != self.digest:
            raise Conflict(
                f"request_id {self.request_id!r} was already used for a sandbox with other "
                f"arguments ({sandbox.public_id}); use a new request_id for a new sandbox"
            )
        deadline = time.monotonic() + START_WAIT
        while sandbox.status == SandboxStatus.STARTING and time.monotonic() < deadline:
            time.sleep(LOOK_EVERY)
            sandbox.refresh_from_db()
        if sandbox.status == SandboxStatus.DELETED and sandbox.status_message.startswith(FAILED):
            raise BackendFailure(
                f"the first try of request {self.request_id!r} could not start its sandbox "
                f"({sandbox.status_message}); try again"
            )
        return sandbox


def digest(arguments: dict[str, Any]) -> str:
    """A digest of the arguments as the caller gave them (an omitted one and None alike)."""
    given = {name: value for name, value in arguments.items() if value is not None}
    text = json.dumps(given, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()
