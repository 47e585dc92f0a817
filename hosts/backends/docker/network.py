"""A network of its own for each network-enabled sandbox, fenced off from the host.

Docker's default bridge lets every container on it talk to every other, and any bridge lets a
container reach the host's own addresses (through the gateway) and link-local addresses such
as a cloud's metadata service. So a sandbox with network gets:

- its own bridge network `sandhub-<sandbox id>`, with inter-container traffic off and its
  bridge interface named `sbx-<11 hex digits>` (a fixed prefix, so a remote engine's
  administrator can match every sandbox bridge with `sbx-+`), labelled like the container so
  reconciliation finds it;
- on a local engine, rules in the filter table, each tagged `sandhub:<network name>`:
  INPUT (traffic to any of the host's own addresses arrives there, not in FORWARD) refuses
  whatever the sandbox starts towards the host; DOCKER-USER (forwarded traffic, checked before
  Docker's own rules) refuses link-local 169.254.0.0/16 and every other container bridge
  (other sandboxes, Docker's default bridge, user-defined networks).

Rules are read with one `iptables -S` and changed in one `iptables-restore --noflush`
transaction, so a change is all or nothing. Installing is idempotent (a network that has its
rules is left alone), removal follows the network, and `ensure_all` (run with each probe)
puts back rules a reboot or a flush removed and drops those of networks that are gone.
Docker disables IPv6 inside containers of networks without IPv6, so IPv4 rules suffice.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import shlex
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

import docker
import docker.errors

from hosts.backends.base import LABEL_INSTANCE, LABEL_POOL, BackendError, ManagedResource
from hosts.backends.docker import local
from hosts.backends.docker.engine import Engine, explain
from hosts.backends.docker.names import LABEL_MANAGED, LABEL_SANDBOX, parse_created

logger = logging.getLogger(__name__)

BRIDGE_PREFIX = "sbx-"
TAG_PREFIX = "sandhub:"
LINK_LOCAL = "169.254.0.0/16"
# Interfaces of other container networks: sandbox bridges, user-defined networks, the default
# bridge. Forwarding from a sandbox to any of them is refused.
_OTHER_BRIDGES = (BRIDGE_PREFIX + "+", "br-+", "docker0")
_REJECT = ["-j", "REJECT", "--reject-with", "icmp-admin-prohibited"]
_EXPECTED = Counter({"INPUT": 1, "DOCKER-USER": 1 + len(_OTHER_BRIDGES)})


def bridge_name(network: str) -> str:
    """The bridge interface of a sandbox network (at most 15 characters, as Linux allows)."""
    return BRIDGE_PREFIX + hashlib.sha256(network.encode()).hexdigest()[:11]


def rules(network: str) -> list[tuple[str, list[str]]]:
    """(chain, rule) pairs that fence the network's sandbox off from the host and the rest."""
    bridge = bridge_name(network)
    tag = ["-m", "comment", "--comment", TAG_PREFIX + network]
    # Replies to connections the host opened (an operator's curl) stay allowed; anything the
    # sandbox starts towards the host is refused, to whichever of its addresses.
    to_host = ["-i", bridge, "-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED"]
    found = [("INPUT", to_host + tag + _REJECT)]
    found.append(("DOCKER-USER", ["-i", bridge, "-d", LINK_LOCAL] + tag + _REJECT))
    for other in _OTHER_BRIDGES:
        found.append(("DOCKER-USER", ["-i", bridge, "-o", other] + tag + _REJECT))
    return found


class Networks:
    """Sandbox networks on one engine, and their rules when the engine is on this machine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @property
    def firewall(self) -> bool:
        """Whether the platform installs the rules: a local engine, unless the host's option
        `firewall` says "external" (its administrator installs them, docs/security.md)."""
        host = self.engine.host
        return local.is_local(host) and host.options.get("firewall", "platform") != "external"

    def _iptables(self) -> str:
        # The same backend (nft or legacy) dockerd uses: the host option names another binary.
        return str(self.engine.host.options.get("iptables", "iptables"))

    # --- lifecycle ---------------------------------------------------------------------------
    def create(self, client: docker.DockerClient, name: str, labels: dict[str, str]) -> None:
        """Create the network and (local engine) its rules; the caller removes it on failure."""
        options = {
            "com.docker.network.bridge.enable_icc": "false",
            "com.docker.network.bridge.name": bridge_name(name),
        }
        try:
            client.networks.create(
                name, driver="bridge", options=options, labels=labels, check_duplicate=True
            )
        except docker.errors.APIError as exc:
            hint = ""
            if "address pool" in explain(exc):
                hint = " (every address pool is taken: see docs/security.md, default-address-pools)"
            raise BackendError(f"creating network {name} failed: {explain(exc)}{hint}") from exc
        if self.firewall:
            try:
                self.install_rules(name)
            except BaseException:
                with contextlib.suppress(Exception):
                    self.remove(name)
                raise

    def remove(self, name: str) -> None:
        """Remove the network and its rules; a missing one is fine. Its container goes first."""
        # Right after a forced container removal the engine may still count its endpoint (409)
        # for a moment; retry briefly instead of leaking the network.
        for attempt in range(20):
            try:
                self.engine.api().remove_network(name)
                break
            except docker.errors.NotFound:
                break
            except docker.errors.APIError as exc:
                if exc.status_code not in (403, 409) or attempt == 19:
                    raise
                time.sleep(0.1)
        if self.firewall:
            self.remove_rules(name)

    def exists(self, client: docker.DockerClient, name: str) -> bool:
        # The engine's name filter matches substrings: compare exactly.
        return any(n.get("Name") == name for n in client.api.networks(names=[name]))

    # --- rules -------------------------------------------------------------------------------
    def install_rules(self, name: str) -> None:
        """Make the network's rules be there exactly once (idempotent)."""
        self._apply(lambda listing: _fix(listing, [name], drop_others=False))

    def remove_rules(self, name: str) -> None:
        self._apply(lambda listing: _deletions(listing.get(TAG_PREFIX + name, [])))

    def ensure_all(self) -> int:
        """Rules for every sandbox network, none for networks that are gone; networks fenced.

        The rules are read before the networks are listed: a rule whose network is missing
        from the later listing belongs to a network that was removed, never to one being made.
        """
        if not self.firewall:
            return 0
        names: list[str] = []

        def plan(listing: dict[str, list[str]]) -> list[str]:
            with self.engine.errors("listing sandbox networks"):
                summaries = self.engine.api().networks(filters={"label": f"{LABEL_MANAGED}=1"})
            names[:] = [n["Name"] for n in summaries if n.get("Name")]
            return _fix(listing, names, drop_others=True)

        self._apply(plan)
        return len(names)

    def _apply(self, plan: Any) -> None:
        """Read the rules, let `plan` turn them into commands, run those in one transaction.

        A concurrent change (another process removing the same rule) fails the transaction:
        read again and retry once.
        """
        for attempt in range(2):
            commands = plan(self._listing())
            if not commands:
                return
            try:
                self._restore(commands)
                return
            except BackendError:
                if attempt == 1:
                    raise

    def _listing(self) -> dict[str, list[str]]:
        """Rules of the filter table tagged by the platform, as `-S` prints them, by tag."""
        output = local.run([self._iptables(), "-w", "-S"], "reading the packet filter rules")
        if "-N DOCKER-USER" not in output.splitlines():
            raise BackendError(
                f"no DOCKER-USER chain in `{self._iptables()} -S`: dockerd uses the other "
                "iptables backend (nft or legacy: set the host option `iptables`) or runs with "
                "--iptables=false; network sandboxes are refused until their rules can be set"
            )
        tagged: dict[str, list[str]] = {}
        for line in output.splitlines():
            tag = _tag_of(line)
            if tag:
                tagged.setdefault(tag, []).append(line)
        return tagged

    def _restore(self, commands: list[str]) -> None:
        text = "*filter\n" + "\n".join(commands) + "\nCOMMIT\n"
        argv = [self._iptables() + "-restore", "-w", "--noflush"]
        local.run(argv, "changing the packet filter rules", stdin=text)

    # --- reconciliation ----------------------------------------------------------------------
    def managed(self) -> list[ManagedResource]:
        with self.engine.errors("listing sandbox networks"):
            summaries = self.engine.api().networks(filters={"label": f"{LABEL_MANAGED}=1"})
        return [_resource(s) for s in summaries]


def _tag_of(line: str) -> str:
    if TAG_PREFIX not in line:
        return ""
    try:
        words = shlex.split(line)
    except ValueError:
        return ""
    for i, word in enumerate(words[:-1]):
        if word == "--comment" and words[i + 1].startswith(TAG_PREFIX):
            return words[i + 1]
    return ""


def _deletions(lines: Iterable[str]) -> list[str]:
    # `-S` prints each rule as the `-A` command that makes it; `-D` with the same words
    # deletes exactly that rule.
    return ["-D" + line[2:] for line in lines if line.startswith("-A ")]


def _fix(listing: dict[str, list[str]], names: list[str], *, drop_others: bool) -> list[str]:
    """Commands that leave each named network with exactly its rules (and, with drop_others,
    no rules for any other network)."""
    commands: list[str] = []
    for name in names:
        present = listing.get(TAG_PREFIX + name, [])
        chains = Counter(line.split()[1] for line in present)
        if chains == _EXPECTED:
            continue
        commands += _deletions(present)
        for chain, rule in rules(name):
            # Plain words: iptables-restore knows double quotes only, and no word needs them.
            commands.append(" ".join(["-I", chain, "1", *rule]))
    if drop_others:
        wanted = {TAG_PREFIX + name for name in names}
        for tag, lines in listing.items():
            if tag not in wanted:
                commands += _deletions(lines)
    return commands


def _resource(summary: dict[str, Any]) -> ManagedResource:
    labels = summary.get("Labels") or {}
    return ManagedResource(
        kind="network",
        label_id=labels.get(LABEL_SANDBOX, ""),
        name=summary.get("Name", ""),
        created_at=parse_created(summary.get("Created")),
        instance=labels.get(LABEL_INSTANCE, ""),
        pool=labels.get(LABEL_POOL) == "1",
        state={"network": summary.get("Name", "")},
    )
