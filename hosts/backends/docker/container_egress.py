"""What a sandbox container gets when its network goes through the egress proxy (issue 27).

- refused before anything is made: network without an egress policy (every network sandbox
  has one), and egress where the platform cannot install the rules (a remote engine, or the
  host option firewall=external): the proxy and its firewall are on this machine;
- `dns=[gateway]`: the engine's resolver inside the container forwards to the gateway's port
  53, which the nat rule sends to the proxy's DNS (network_rules.py);
- the proxy variables (hosts/backends/egress.proxy_environment) with the gateway as the
  proxy's address, the sandbox id and its token as the credential;
- the trust bundle (trust.py) bound read-only at the path the variables name and over the
  system bundle;
- state: "egress_address", the container's address on its network (the proxy tells sandboxes
  apart by it), and "egress_gateway".
"""

from __future__ import annotations

import logging
from typing import Any

from docker.models.containers import Container
from docker.types import Mount

from hosts.backends.base import BackendError, SandboxSpec
from hosts.backends.docker import trust
from hosts.backends.docker.network_rules import Fence, ports_label
from hosts.backends.egress import BUNDLE_PATH, SYSTEM_BUNDLE_PATH, proxy_environment, proxy_url

logger = logging.getLogger(__name__)


def refuse_unsupported(spec: SandboxSpec, firewall: bool, host: object) -> None:
    """BackendError for a network this host cannot give the sandbox."""
    if spec.network and spec.egress is None:
        raise BackendError(
            "network without an egress policy: a sandbox's network goes through the egress "
            "proxy (allowlist or public mode)"
        )
    if spec.egress is not None and not spec.network:
        raise BackendError("an egress policy without network: ask for both, or neither")
    if spec.egress is not None and not firewall:
        raise BackendError(
            f"host {host} cannot give sandboxes network: the egress proxy and its firewall "
            "live on this machine, and this host's engine is remote or its firewall is "
            "external (host option firewall=external)"
        )


def network_labels(spec: SandboxSpec) -> dict[str, str]:
    """The proxy's ports on the network, for the repair of its rules (network_rules.py)."""
    if spec.egress is None:
        return {}
    return ports_label(spec.egress.proxy_port, spec.egress.dns_port)


def container_options(spec: SandboxSpec, fence: Fence | None) -> dict[str, Any]:
    """Keyword arguments of containers.create for the sandbox's egress: none without one.
    Writes the trust bundle (removed with the network)."""
    if spec.egress is None or fence is None:
        return {"environment": dict(spec.env)}
    if not fence.egress:
        raise BackendError(f"network {fence.network} has no IPv4 gateway for the egress proxy")
    egress = spec.egress
    url = proxy_url(spec.sandbox_id, egress.token, fence.gateway, egress.proxy_port)
    bundle = str(trust.write_bundle(fence.network, egress.ca_pem))
    return {
        "environment": {**spec.env, **proxy_environment(url)},
        "dns": [fence.gateway],
        "mounts": [
            Mount(target, bundle, type="bind", read_only=True)
            for target in (BUNDLE_PATH, SYSTEM_BUNDLE_PATH)
        ],
    }


def address_of(container: Container, network: str) -> str:
    """The container's address on its network, as the engine's last inspection says."""
    networks = container.attrs.get("NetworkSettings", {}).get("Networks") or {}
    return str((networks.get(network) or {}).get("IPAddress") or "")


def egress_state(container: Container, fence: Fence | None) -> dict[str, str]:
    if fence is None or not fence.egress:
        return {}
    address = address_of(container, fence.network)
    if not address:
        raise BackendError(f"container {container.name} has no address on {fence.network}")
    return {"egress_address": address, "egress_gateway": fence.gateway}


def refresh_address(state: dict[str, Any], container: Container, network: str) -> None:
    """After a start: the address the engine gave the container now (the same one, as a
    network holds only this container; said loudly if not, and the state follows it)."""
    if not state.get("egress_gateway"):
        return
    address = address_of(container, network)
    if address and address != state.get("egress_address"):
        logger.warning(
            "sandbox container %s came back with address %s (was %s)",
            container.name,
            address,
            state.get("egress_address"),
        )
        state["egress_address"] = address
