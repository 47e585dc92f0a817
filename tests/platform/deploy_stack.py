"""The production layout on loopback, for tests/platform/test_deploy_nginx.py: a self-signed
certificate, web processes run by scripts/web.sh as they are (one uvicorn each, on the test
database), and nginx with deploy/nginx/sandhub.conf rendered for them. Not a test module.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.live import free_port
from tests.webprocess import WebProcess, stop_group

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deploy" / "nginx" / "sandhub.conf"
PLATFORM_HOST = "localhost"  # resolves to loopback without DNS
PREVIEW_DOMAIN = "preview.localhost"
# The access log says which upstream served each request (and that a refused one reached none).
LOG_FORMAT = '$remote_addr "$request" $status upstream=$upstream_addr'


def nginx_binary() -> str | None:
    return shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for the platform's host and the wildcard preview domain."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, PLATFORM_HOST)])
    now = datetime.datetime.now(datetime.UTC)
    names = [x509.DNSName(PLATFORM_HOST), x509.DNSName(f"*.{PREVIEW_DOMAIN}")]
    names.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def render(
    config: str, *, tls_port: int, http_port: int, upstreams: list[int], cert: Path, key: Path
) -> str:
    """The repository's configuration with its placeholders filled for loopback."""
    lines = [line for line in config.splitlines() if "[::]" not in line]  # no IPv6 here
    text = "\n".join(lines) + "\n"
    servers = "".join(
        f"    server 127.0.0.1:{port} max_fails=1 fail_timeout=5s;\n" for port in upstreams
    )
    first, last = "    server 127.0.0.1:8001", "    server 127.0.0.1:8002"
    start = text.index(first)
    end = text.index("\n", text.index(last)) + 1
    text = text[:start] + servers + text[end:]
    replacements = {
        "listen 443 ssl": f"listen 127.0.0.1:{tls_port} ssl",
        "listen 80;": f"listen 127.0.0.1:{http_port};",
        "sandhub-preview.example.net": PREVIEW_DOMAIN,
        "sandhub.example.com": PLATFORM_HOST,
        "/etc/ssl/sandhub/platform.crt": str(cert),
        "/etc/ssl/sandhub/preview.crt": str(cert),
        "/etc/ssl/sandhub/platform.key": str(key),
        "/etc/ssl/sandhub/preview.key": str(key),
    }
    for placeholder, value in replacements.items():
        assert placeholder in text, placeholder
        text = text.replace(placeholder, value)
    return text


@dataclass
class Nginx:
    tls_port: int
    http_port: int
    access_log: Path
    process: subprocess.Popen

    def upstreams_used(self) -> set[str]:
        return {
            line.rsplit("upstream=", 1)[1]
            for line in self.access_log.read_text().splitlines()
            if "upstream=" in line and not line.endswith("upstream=-")
        }

    def log_lines(self) -> list[str]:
        return self.access_log.read_text().splitlines()


def main_config(prefix: Path, site: Path, access_log: Path) -> str:
    user = "user root root;\n" if os.geteuid() == 0 else ""  # its workers read our temp dir
    return (
        f"{user}daemon off;\nworker_processes 1;\npid {prefix}/nginx.pid;\n"
        f"error_log {prefix}/error.log info;\n"
        "events { worker_connections 256; }\n"
        "http {\n"
        f"  log_format sandhub '{LOG_FORMAT}';\n"
        f"  access_log {access_log} sandhub;\n"
        f"  client_body_temp_path {prefix}/body;\n  proxy_temp_path {prefix}/proxy;\n"
        f"  fastcgi_temp_path {prefix}/fastcgi;\n  uwsgi_temp_path {prefix}/uwsgi;\n"
        f"  scgi_temp_path {prefix}/scgi;\n"
        f"  include {site};\n"
        "}\n"
    )


@contextlib.contextmanager
def running_nginx(binary: str, prefix: Path, upstreams: list[int]) -> Iterator[Nginx]:
    cert, key = make_certificate(prefix)
    tls_port, http_port = free_port(), free_port()
    site = prefix / "sandhub.conf"
    site.write_text(
        render(
            CONFIG.read_text(),
            tls_port=tls_port,
            http_port=http_port,
            upstreams=upstreams,
            cert=cert,
            key=key,
        )
    )
    access_log = prefix / "access.log"
    access_log.touch()
    conf = prefix / "nginx.conf"
    conf.write_text(main_config(prefix, site, access_log))
    checked = subprocess.run(
        [binary, "-t", "-p", str(prefix), "-c", str(conf)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr
    log = open(prefix / "nginx.out", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [binary, "-p", str(prefix), "-c", str(conf)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _wait_for_port(tls_port, process, prefix / "error.log")
        yield Nginx(tls_port, http_port, access_log, process)
    finally:
        stop_group(process, timeout=15)
        log.close()


@contextlib.contextmanager
def running_web(directory: Path, **env: str) -> Iterator[WebProcess]:
    """scripts/web.sh as the systemd unit runs it: one uvicorn on a loopback port, answering
    the platform's host name (ALLOWED_HOSTS is the deployment's)."""
    port = free_port()
    web = WebProcess(directory / f"web-{port}.log", port, host_header=PLATFORM_HOST, env=env)
    try:
        yield web.start()
    finally:
        web.stop()


def _wait_for_port(port: int, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"nginx exited at start:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"nginx not listening:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)


WEB_ENV = {
    "ALLOWED_HOSTS": PLATFORM_HOST,
    "SANDHUB_PREVIEW_DOMAIN": PREVIEW_DOMAIN,
    "SANDHUB_SECURE_COOKIES": "1",
}


@contextlib.contextmanager
def production_stack(binary: str, directory: Path) -> Iterator[Nginx]:
    """Two web processes (scripts/web.sh) behind nginx with the repository's configuration;
    the certificate nginx serves is `directory / "cert.pem"`."""
    with contextlib.ExitStack() as stack:
        first = stack.enter_context(running_web(directory, **WEB_ENV))
        second = stack.enter_context(running_web(directory, **WEB_ENV))
        yield stack.enter_context(running_nginx(binary, directory, [first.port, second.port]))
