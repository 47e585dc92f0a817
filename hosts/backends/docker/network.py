"""A network of its own for each network-enabled sandbox, that routes only to the egress proxy.

Docker's default bridge lets every container on it talk to every other, and any bridge lets a
container reach the host's own addresses (through the gateway), link-local addresses such as
a cloud's metadata service, and whatever the host routes to. So a sandbox with network gets:

- its own bridge network `sandhub-<sandbox id>`, with inter-container traffic off and its
  bridge interface named `sbx-<11 hex digits>` (a fixed prefix, so a remote engine's
  administrator can match every sandbox bridge with `sbx-+`), labelled like the container so
  reconciliation finds it, and with the egress proxy's ports (network_rules.LABEL_EGRESS_PORTS);
- rules in the filter and nat tables (network_rules.py), each tagged `sandhub:<network name>`:
  its HTTP, HTTPS and DNS go to the egress proxy on this machine, everything else is refused.
  The proxy and its firewall live on this machine: a remote engine, or a host whose option
  `firewall` is "external", cannot have network sandboxes (BackendError at provision);
- the proxy's trust bundle (trust.py), beside the rules, removed with the network.

Rules are read with one `iptables -S` per table and changed in one `iptables-restore --noflush`
input (a section per table), so a change is all or nothing per table. Installing is idempotent
(a network that has its rules is left alone), removal follows the network, and `ensure_all`
(run with each probe) puts back rules a reboot or a flush removed and drops those of networks
that are gone, in both tables. Docker disables IPv6 inside containers of networks without
IPv6, so IPv4 rules suffice.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import docker
import docker.errors

from hosts.backends.base import LABEL_INSTANCE, LABEL_POOL, BackendError, ManagedResource
from hosts.backends.docker import local, trust
from hosts.backends.docker.engine import Engine, explain
from hosts.backends.docker.names import LABEL_MANAGED, LABEL_SANDBOX, parse_created
from hosts.backends.docker.network_rules import (
    TABLES,
    TAG_PREFIX,
    Fence,
    Listing,
    bridge_name,
    deletions,
    fence_of,
    fix,
    restore_input,
    tag_of,
)

logger = logging.getLogger(__name__)

# A plan: from the tagged rules now present, the (table, command) pairs to run.
Plan = Callable[[Listing], list[tuple[str, str]]]


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
    def create(self, client: docker.DockerClient, name: str, labels: dict[str, str]) -> Fence:
        """Create the network and (local engine) its rules; the caller removes it on failure.
        Its fence: the gateway and subnet the engine gave it, the proxy's ports of `labels`."""
        options = {
            "com.docker.network.bridge.enable_icc": "false",
            "com.docker.network.bridge.name": bridge_name(name),
        }
        try:
            made = client.networks.create(
                name, driver="bridge", options=options, labels=labels, check_duplicate=True
            )
        except docker.errors.APIError as exc:
            hint = ""
            if "address pool" in explain(exc):
                hint = " (every address pool is taken: see docs/security.md, default-address-pools)"
            raise BackendError(f"creating network {name} failed: {explain(exc)}{hint}") from exc
        fence = fence_of({**made.attrs, "Name": name})
        if self.firewall:
            try:
                self.install_rules(fence)
            except BaseException:
                with contextlib.suppress(Exception):
                    self.remove(name)
                raise
        return fence

    def remove(self, name: str) -> None:
        """Remove the network, its rules and its trust bundle; a missing one is fine. Its
        container goes first."""
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
        if local.is_local(self.engine.host):
            trust.remove_bundle(name)

    def exists(self, client: docker.DockerClient, name: str) -> bool:
        return self._summary(name) is not None

    def _summary(self, name: str) -> dict[str, Any] | None:
        # The engine's name filter matches substrings: compare exactly.
        with self.engine.errors(f"inspecting network {name}"):
            found = self.engine.api().networks(names=[name])
        return next((n for n in found if n.get("Name") == name), None)

    # --- rules -------------------------------------------------------------------------------
    def install_rules(self, network: str | Fence) -> None:
        """Make the network's rules be there exactly once (idempotent). A name: its fence is
        read from the engine (labels, addresses)."""
        fence = network if isinstance(network, Fence) else self._fence(network)
        self._apply(lambda listing: fix(listing, [fence], drop_others=False))

    def _fence(self, name: str) -> Fence:
        summary = self._summary(name)
        if summary is None:
            raise BackendError(f"network {name} is missing on host {self.engine.host}")
        return fence_of(summary)

    def remove_rules(self, name: str) -> None:
        self._apply(lambda listing: deletions(listing.get(TAG_PREFIX + name, [])))

    def ensure_all(self) -> int:
        """Rules for every sandbox network, none (and no trust bundle) for networks that are
        gone; networks fenced.

        The rules are read before the networks are listed: a rule whose network is missing
        from the later listing belongs to a network that was removed, never to one being made.
        """
        if not self.firewall:
            return 0
        # Listed before the networks too, and written after its network is made: a bundle
        # whose network is missing from the later listing is a leftover.
        bundles = trust.bundle_networks()
        fences: list[Fence] = []

        def plan(listing: Listing) -> list[tuple[str, str]]:
            with self.engine.errors("listing sandbox networks"):
                summaries = self.engine.api().networks(filters={"label": f"{LABEL_MANAGED}=1"})
            fences[:] = [fence_of(n) for n in summaries if n.get("Name")]
            return fix(listing, fences, drop_others=True)

        self._apply(plan)
        for leftover in set(bundles) - {fence.network for fence in fences}:
            trust.remove_bundle(leftover)
        return len(fences)

    def _apply(self, plan: Plan) -> None:
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

    def _listing(self) -> Listing:
        """Rules tagged by the platform in the filter and nat tables, as `-S` prints them."""
        tagged: Listing = {}
        for table in TABLES:
            output = local.run(
                [self._iptables(), "-w", "-t", table, "-S"], "reading the packet filter rules"
            )
            if table == "filter" and "-N DOCKER-USER" not in output.splitlines():
                raise BackendError(
                    f"no DOCKER-USER chain in `{self._iptables()} -S`: dockerd uses the other "
                    "iptables backend (nft or legacy: set the host option `iptables`) or runs "
                    "with --iptables=false; network sandboxes are refused until their rules "
                    "can be set"
                )
            for line in output.splitlines():
                tag = tag_of(line)
                if tag:
                    tagged.setdefault(tag, []).append((table, line))
        return tagged

    def _restore(self, commands: list[tuple[str, str]]) -> None:
        argv = [self._iptables() + "-restore", "-w", "--noflush"]
        local.run(argv, "changing the packet filter rules", stdin=restore_input(commands))

    # --- reconciliation ----------------------------------------------------------------------
    def managed(self) -> list[ManagedResource]:
        with self.engine.errors("listing sandbox networks"):
            summaries = self.engine.api().networks(filters={"label": f"{LABEL_MANAGED}=1"})
        return [_resource(s) for s in summaries]


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
