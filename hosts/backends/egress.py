"""What every backend puts into a sandbox whose network goes through the egress proxy: the
proxy's address in the variables clients read, and a trust bundle with the deployment's CA.

The proxy intercepts TLS only for hosts a secret is bound to; a client that checks
certificates must then trust the deployment's CA. Most clients read the system bundle; Python's
requests and pip, Node and git read variables of their own, so all of them are set.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

# Where the bundle is inside a sandbox: the path the variables name, and the system path it
# is also bound over (read-only) for clients that read only that one.
BUNDLE_PATH = "/etc/sandhub/ca-bundle.crt"
SYSTEM_BUNDLE_PATH = "/etc/ssl/certs/ca-certificates.crt"

_BUNDLE_VARIABLES = (
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "PIP_CERT",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
)


def proxy_url(sandbox_id: str, token: str, host: str, port: int) -> str:
    """The proxy as clients take it from HTTP_PROXY: the sandbox's credential in it."""
    return f"http://{quote(sandbox_id, safe='')}:{quote(token, safe='')}@{host}:{port}"


def proxy_environment(url: str, bundle_path: str = BUNDLE_PATH) -> dict[str, str]:
    """The variables that send a sandbox's clients to the proxy and make them trust the CA."""
    env = {name: url for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}
    local = "localhost,127.0.0.1,::1"
    env.update({"NO_PROXY": local, "no_proxy": local})
    env.update({name: bundle_path for name in _BUNDLE_VARIABLES})
    return env


def trust_bundle(ca_pem: str, system_bundle: str = SYSTEM_BUNDLE_PATH) -> bytes:
    """This machine's CA bundle (when it has one) followed by the deployment's CA."""
    try:
        system = Path(system_bundle).read_bytes()
    except OSError:
        system = b""
    if system and not system.endswith(b"\n"):
        system += b"\n"
    return system + ca_pem.strip().encode() + b"\n"
