"""python manage.py add_host NAME ENDPOINT [login] [--fingerprint SHA256:...] [--base-dir D]
[--team SLUG] [--max-sandboxes N] [--kind ssh|docker]: a host added from a script.

    # 1. read the SSH host's key (no login, nothing saved), compare it on the host
    manage.py add_host gpu-01 ssh://sandhub@10.0.0.5:22 --key-file ~/.ssh/sandhub_ed25519
    # 2. add it with that fingerprint: checked, logged in, probed, then saved pinned
    manage.py add_host gpu-01 ssh://sandhub@10.0.0.5:22 --key-file ~/.ssh/sandhub_ed25519 \\
        --fingerprint SHA256:...
    # a Docker engine: probed, then saved
    manage.py add_host local unix:///var/run/docker.sock
    manage.py add_host box tcp://10.0.0.6:2376 --tls-ca ca.pem --tls-cert cert.pem --tls-key key.pem

Secrets come from files or environment variables only (never the command line, which other
users of the machine can read in `ps`), and are never printed. An interface: it calls
sandboxes.services and nothing below.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from sandboxes import services
from sandboxes.contract.errors import ServiceError
from sandboxes.contract.results import HostInfo, HostKeyInfo
from tenants.models import Channel
from tenants.principal import Principal

# Where OpenSSH keeps each type of host key, for the line telling the admin what to compare.
_KEY_FILES = {
    "ssh-ed25519": "/etc/ssh/ssh_host_ed25519_key.pub",
    "ssh-rsa": "/etc/ssh/ssh_host_rsa_key.pub",
}
_ECDSA_FILE = "/etc/ssh/ssh_host_ecdsa_key.pub"


class Command(BaseCommand):
    help = (
        "Add an SSH host (ssh://USER@ADDRESS:PORT) or a Docker engine (unix://, tcp:// with "
        "TLS, ssh://). Without --fingerprint an SSH host's key is only read and shown: "
        "nothing is saved. Secrets are read from files or environment variables."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="the host's name in Sandhub")
        parser.add_argument(
            "endpoint", help="ssh://USER@ADDRESS[:PORT], unix:///PATH, tcp://ADDRESS:PORT"
        )
        parser.add_argument(
            "--kind",
            choices=["ssh", "docker"],
            default="",
            help="default: ssh for an ssh:// endpoint, else docker (a Docker engine reached "
            "over ssh:// needs --kind docker)",
        )
        login = parser.add_mutually_exclusive_group()
        login.add_argument("--key-file", help="SSH private key file (Ed25519, RSA, ECDSA)")
        login.add_argument("--password-env", metavar="VAR", help="env variable with the password")
        parser.add_argument(
            "--passphrase-env", metavar="VAR", help="env variable with the key's passphrase"
        )
        for name, what in (("ca", "CA certificate"), ("cert", "client certificate"),
                           ("key", "client key")):  # fmt: skip
            parser.add_argument(f"--tls-{name}", metavar="FILE", help=f"Docker TLS: {what} (PEM)")
        parser.add_argument(
            "--fingerprint",
            default="",
            help="the SSH host key's SHA256:... fingerprint, as `ssh-keygen -lf` prints it on "
            "the host; without it the key is only shown",
        )
        parser.add_argument("--base-dir", default="", help="SSH: where sandboxes' directories go")
        parser.add_argument("--team", default="", help="slug of the team the host is private to")
        parser.add_argument("--max-sandboxes", type=int, default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        # Whoever runs manage.py on the server acts as the platform; the audit rows say which
        # command did it.
        principal = Principal(
            user=None, team=None, channel=Channel.SYSTEM, extra={"via": "manage.py add_host"}
        )
        try:
            if _is_ssh(options) and not options["fingerprint"]:
                login = _login(options)  # read now: a missing key file fails before the network
                if login is None:
                    raise CommandError("an SSH host needs --key-file or --password-env")
                self._show_key(services.read_host_key(principal, options["endpoint"]))
                return
            info = services.add_host(
                principal,
                options["name"],
                options["endpoint"],
                kind=options["kind"],
                login=_login(options),
                fingerprint=options["fingerprint"],
                base_dir=options["base_dir"],
                team=options["team"],
                max_sandboxes=options["max_sandboxes"],
            )
        except ServiceError as exc:
            raise CommandError(exc.message) from exc
        self._show_added(info, options)

    # --- output ------------------------------------------------------------------------------

    def _show_key(self, key: HostKeyInfo) -> None:
        path = _KEY_FILES.get(key.key_type, _ECDSA_FILE)
        self.stdout.write(f"host key of {key.host}: {key.key_type} {key.fingerprint}")
        self.stdout.write(
            f"Compare it with the host's own, read on the host itself: ssh-keygen -lf {path}\n"
            f"If they are the same, run this command again with --fingerprint {key.fingerprint}"
        )
        self.stdout.write("Nothing was saved.")

    def _show_added(self, info: HostInfo, options: dict[str, Any]) -> None:
        details = info.details
        private = f", private to team {options['team']}" if options["team"] else ""
        self.stdout.write(self.style.SUCCESS(f"added {info.kind} host {info.name}{private}"))
        self.stdout.write(
            f"  probe: healthy, idle score {info.idle_score:.2f}, cpu {_percent(info.cpu_percent)}"
            f", memory {_percent(info.memory_percent)}"
        )
        if info.kind == "ssh":
            self._show_ssh(info, details, bool(options["team"]))
        else:
            self.stdout.write(
                f"  engine: Docker {details.get('server_version') or '?'}, "
                f"{details.get('ncpu', '?')} CPUs, "
                f"{int(details.get('mem_total_bytes') or 0) // 2**20} MiB"
            )

    def _show_ssh(self, info: HostInfo, details: dict[str, Any], private: bool) -> None:
        facts = details.get("facts") or {}
        self.stdout.write(
            f"  login: {facts.get('login_user', '?')}, sudo -n: "
            f"{'yes' if details.get('sudo') else 'no'}, systemd: "
            f"{'yes' if details.get('systemd') else 'no'}"
        )
        controllers = ", ".join(facts.get("cgroup_controllers") or ()) or "none"
        self.stdout.write(
            f"  cgroups: {facts.get('cgroup') or 'none'} ({controllers}), user namespaces: "
            f"{'yes' if facts.get('userns') else 'no'}, /proc hidepid: "
            f"{'yes' if facts.get('hidepid') else 'no'}"
        )
        if details.get("per_sandbox_users"):
            self.stdout.write("  per-sandbox users: yes (each sandbox gets its own Unix user)")
        else:
            self.stdout.write("  per-sandbox users: no (sandboxes share the login user)")
        if details.get("isolated"):
            self.stdout.write(
                "  isolated: yes (namespaces, cgroups and a filesystem per sandbox): "
                "may be shared by teams"
            )
        else:
            where = "" if private else " -- and this host has no team, so none will get it"
            self.stdout.write(f"  isolated: no: offered only to the team it is private to{where}")
            for reason in details.get("isolation_missing") or ():
                self.stdout.write(f"    - {reason}")
        python = facts.get("python3") or ""
        self.stdout.write(
            f"  python3: {python}"
            if python
            else "  python3: missing -- each command then costs an SSH exec (no sandbox agent), "
            "and uploads need python3 (install it on the host)"
        )
        gpus = ", ".join(
            f"{g.index}: {g.name or '?'} {g.busy_percent:.0f}% busy" for g in info.gpus
        )
        self.stdout.write(f"  GPUs: {len(info.gpus)}" + (f" ({gpus})" if gpus else ""))


# --- secrets: files and environment variables only ---------------------------------------------


def _is_ssh(options: dict[str, Any]) -> bool:
    if options["kind"]:
        return options["kind"] == "ssh"
    return str(options["endpoint"]).strip().startswith("ssh://")


def _login(options: dict[str, Any]) -> services.LoginSecret | None:
    tls = [options[f"tls_{name}"] for name in ("ca", "cert", "key")]
    if any(tls):
        if not all(tls) or options["key_file"] or options["password_env"]:
            raise CommandError("Docker TLS takes all of --tls-ca, --tls-cert, --tls-key, alone")
        ca, cert, key = (_read(path, "TLS file") for path in tls)
        return services.LoginSecret.docker_tls(ca, cert, key)
    if options["key_file"]:
        passphrase = _env(options["passphrase_env"]) if options["passphrase_env"] else ""
        return services.LoginSecret.private_key(_read(options["key_file"], "key file"), passphrase)
    if options["passphrase_env"]:
        raise CommandError("--passphrase-env goes with --key-file")
    if options["password_env"]:
        return services.LoginSecret.password(_env(options["password_env"]))
    return None


def _read(path: str, what: str) -> str:
    try:
        return Path(path).expanduser().read_text()
    except (OSError, UnicodeDecodeError) as exc:
        # The path and the reason only: never the content.
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise CommandError(f"cannot read the {what} {path}: {reason}") from exc


def _env(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        raise CommandError(f"the environment variable {name} is not set or empty")
    return value


def _percent(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f}%"
