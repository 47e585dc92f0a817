"""Where sandboxes live: hosts, their credentials, and the images teams may use."""

from __future__ import annotations

from django.db import models

from hosts import crypto
from tenants.models import Team


class Credential(models.Model):
    class Kind(models.TextChoices):
        PASSWORD = "password", "Password"
        PRIVATE_KEY = "private_key", "SSH private key"
        DOCKER_TLS = "docker_tls", "Docker TLS material (JSON: ca, cert, key)"

    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    username = models.CharField(max_length=200, blank=True)
    # Fernet token; never rendered back in admin or logged.
    secret_encrypted = models.TextField(editable=False)
    # An SSH private key's passphrase, encrypted the same way; empty: none.
    passphrase_encrypted = models.TextField(editable=False, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.get_kind_display()})"

    def __repr__(self) -> str:  # never the secret, not even encrypted
        return f"<Credential {self.pk} {self.name!r} {self.kind}>"

    def set_secret(self, plaintext: str) -> None:
        self.secret_encrypted = crypto.encrypt(plaintext)

    def get_secret(self) -> str:
        return crypto.decrypt(self.secret_encrypted)

    def set_passphrase(self, plaintext: str) -> None:
        self.passphrase_encrypted = crypto.encrypt(plaintext) if plaintext else ""

    def get_passphrase(self) -> str | None:
        return crypto.decrypt(self.passphrase_encrypted) if self.passphrase_encrypted else None

    def rotate_key(self) -> None:
        self.secret_encrypted = crypto.rotate(self.secret_encrypted)
        if self.passphrase_encrypted:
            self.passphrase_encrypted = crypto.rotate(self.passphrase_encrypted)
        self.save(update_fields=["secret_encrypted", "passphrase_encrypted", "updated_at"])


class Host(models.Model):
    class Kind(models.TextChoices):
        DOCKER = "docker", "Docker engine"
        SSH = "ssh", "SSH server"

    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    endpoint = models.CharField(
        max_length=500,
        help_text="Docker: unix:///var/run/docker.sock, tcp://host:2376 or ssh://user@host. "
        "SSH: address:port (the login user is the credential's username).",
    )
    credential = models.ForeignKey(Credential, null=True, blank=True, on_delete=models.PROTECT)
    team = models.ForeignKey(
        Team,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        help_text="Set for a private host that only this team may use.",
    )
    enabled = models.BooleanField(default=True)
    draining = models.BooleanField(
        default=False, help_text="A draining host keeps its sandboxes but gets no new ones."
    )
    max_sandboxes = models.PositiveIntegerField(default=20)
    labels = models.JSONField(default=dict, blank=True)
    options = models.JSONField(default=dict, blank=True, help_text="Backend options.")
    # SSH hosts. The host key is pinned: `host_key_seen` is what the host last presented
    # (fetched by an admin action, or met on a refused connection), `host_key_pinned` what an
    # admin confirmed. Until one is confirmed the host is not used; a key that differs from
    # the pinned one refuses every connection. Never accepted automatically.
    base_dir = models.CharField(
        max_length=300,
        blank=True,
        help_text="SSH: the directory under which each sandbox gets its own "
        "(default /var/tmp/sandhub).",
    )
    host_key_pinned = models.CharField(
        max_length=100, blank=True, help_text="SSH: the confirmed host key (SHA256:...)."
    )
    host_key_seen = models.CharField(
        max_length=100, blank=True, help_text="SSH: the key the host last presented."
    )
    host_key_type = models.CharField(max_length=40, blank=True)
    host_key_seen_at = models.DateTimeField(null=True, blank=True)
    per_sandbox_users = models.BooleanField(
        null=True,
        blank=True,
        help_text="SSH: whether the login user may `sudo -n`, so each sandbox gets its own Unix "
        "user (checked by probes).",
    )
    isolated = models.BooleanField(
        default=False,
        help_text="SSH: sandboxes on this host run in their own namespaces, cgroups and "
        "filesystem (checked by probes). Shared hosts need it: without, the host is offered "
        "only to its own team.",
    )
    isolation_missing = models.TextField(
        blank=True,
        default="",
        help_text="SSH: why sandboxes on this host cannot be isolated, one reason per line "
        "(from the last probe).",
    )
    gpu_count = models.PositiveIntegerField(default=0)
    gpus = models.JSONField(default=list, blank=True, help_text="Per-GPU use, from the last probe.")
    # Last probe.
    healthy = models.BooleanField(default=True)
    last_probe_at = models.DateTimeField(null=True, blank=True)
    cpu_percent = models.FloatField(null=True, blank=True)
    memory_percent = models.FloatField(null=True, blank=True)
    gpu_percent = models.FloatField(null=True, blank=True)
    idle_score = models.FloatField(default=1.0, help_text="0 = saturated, 1 = idle.")
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    # No backend() here: a model must not reach up into hosts.backends (see the import-linter
    # contracts in pyproject.toml); callers use hosts.backends.get_backend(host).
    def __str__(self) -> str:
        return self.name


class Image(models.Model):
    name = models.CharField(
        max_length=100, unique=True, help_text="What users ask for, e.g. python."
    )
    reference = models.CharField(
        max_length=300, help_text="Engine reference, e.g. sandhub/sandbox:latest."
    )
    description = models.CharField(max_length=300, blank=True)
    is_default = models.BooleanField(default=False)
    teams = models.ManyToManyField(
        Team, blank=True, help_text="Teams that may use this image; none selected means every team."
    )
    warm_pool_size = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_default"], condition=models.Q(is_default=True), name="one_default_image"
            )
        ]

    def __str__(self) -> str:
        return self.name

    def allowed_for(self, team: Team) -> bool:
        return not self.teams.exists() or self.teams.filter(pk=team.pk).exists()
