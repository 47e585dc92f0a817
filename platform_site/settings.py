"""Sandhub settings: everything that differs between deployments comes from the environment.

See the README's table of environment variables.
"""

from __future__ import annotations

from pathlib import Path

import dj_database_url
from cryptography.fernet import Fernet

from platform_site.env import (
    EnvError,
    env_bool,
    env_choice,
    env_host_map,
    env_int,
    env_list,
    env_str,
    env_token,
    generate_django_secret,
    secret_from_file,
)
from platform_site.logformat import LOG_FORMATS, logging_config
from platform_site.private_files import private_directory

BASE_DIR = Path(__file__).resolve().parent.parent
# The platform's own files (database, secrets, disk images): 0700, no other user reads them
# (platform_site/private_files.py).
VAR_DIR = private_directory(Path(env_str("SANDHUB_VAR_DIR", str(BASE_DIR / "var"))))

SECRET_KEY = secret_from_file("SECRET_KEY", VAR_DIR / "secret_key", generate_django_secret)
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# Behind a TLS-terminating proxy (deploy/nginx/sandhub.conf): the session and CSRF cookies
# only ever travel over https. Off by default, since `make run` serves plain http.
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("SANDHUB_SECURE_COOKIES", False)

# Fernet keys for credentials at rest: the first encrypts, every one decrypts, so a key is
# rotated by putting the new one first and re-saving (manage.py rotate_credentials).
CREDENTIAL_KEYS = env_list("SANDHUB_CREDENTIAL_KEYS") or [
    secret_from_file(
        "SANDHUB_CREDENTIAL_KEY",
        VAR_DIR / "credential_key",
        lambda: Fernet.generate_key().decode(),
    )
]

INSTALLED_APPS = [
    # First: its ready() takes other users' access from the platform's files at start.
    "platform_site.apps.PlatformSiteConfig",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "django_q",
    "tenants",
    "hosts",
    "sandboxes",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Near the top: its header goes on the answers of the middleware below too (csp.py).
    "platform_site.csp.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "platform_site.urls"
WSGI_APPLICATION = "platform_site.wsgi.application"
ASGI_APPLICATION = "platform_site.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                # `web` in templates: the team web pages' principal, role and teams.
                "sandboxes.web.context.web",
            ],
            # {% load expiry %}: the warning before a sandbox expires (sandboxes/web/expiry.py).
            "libraries": {"expiry": "sandboxes.web.expiry"},
        },
    },
]


SQLITE_ENGINE = "platform_site.sqlite3"


def _database() -> dj_database_url.DBConfig:
    url = env_str("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'sandhub.sqlite3'}"
    try:
        config = dj_database_url.parse(url)
    except ValueError as exc:
        raise EnvError(f"DATABASE_URL is not a database URL: {exc}") from exc
    sqlite = config["ENGINE"] == "django.db.backends.sqlite3"
    if sqlite:
        config["ENGINE"] = SQLITE_ENGINE  # Django's, without RETURNING (sqlite3/base.py)
    # Seconds a thread keeps its connection between calls. SQLite's cost nothing to keep, and
    # opening one (with the pragmas below) was a fixed cost on every MCP call; PostgreSQL's
    # are closed after each call by default (a server's connection slots are few).
    config["CONN_MAX_AGE"] = env_int("DB_CONN_MAX_AGE", 600 if sqlite else 0, minimum=0)
    config["CONN_HEALTH_CHECKS"] = True
    if sqlite:
        # The worker and the web processes share the file: wait for locks instead of failing.
        # WAL lets readers run beside the one writer; with it, synchronous=NORMAL syncs at
        # checkpoints instead of at every commit (a crash may lose the last commits, never
        # corrupt the file). Without these, each row written costs a few ms of fsync.
        config["OPTIONS"] = {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    return config


DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
# The web pages' own files (stylesheet, vendored htmx), beside the apps' static directories.
STATICFILES_DIRS = [BASE_DIR / "static"]
LOGIN_URL = "/login/"

# Text, or one JSON object a line for a log collector (SANDHUB_LOG_FORMAT=json: logformat.py).
LOGGING = logging_config(
    env_choice("SANDHUB_LOG_FORMAT", "text", LOG_FORMATS),
    level=env_str("LOG_LEVEL", "INFO"),
    mcp_level=env_str("MCP_LOG_LEVEL", "WARNING"),
)

# django-q2 with the ORM broker: no extra service to run. It reads this once at import.
Q_CLUSTER = {
    "name": "sandhub",
    "orm": "default",
    "workers": env_int("SANDHUB_WORKERS", 2, minimum=1),
    "timeout": env_int("SANDHUB_TASK_TIMEOUT", 3600, minimum=10),
    "retry": env_int("SANDHUB_TASK_TIMEOUT", 3600, minimum=10) + 60,
    "max_attempts": 1,
    "catch_up": False,
    "label": "Tasks",
}

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # Programs send an API key as a Bearer token; a signed-in browser uses its session.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "sandboxes.api.authentication.ApiKeyAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # JSON with a size limit, and multipart for uploads (no form-encoded bodies: DRF would
    # read those whole, unlimited).
    "DEFAULT_PARSER_CLASSES": [
        "sandboxes.api.parsers.LimitedJSONParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "sandboxes.api.base.exception_handler",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Sandhub API",
    "DESCRIPTION": "Sandboxes for AI coding agents: create, run, move files, clean up.",
    "VERSION": "1",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # No badge image from validator.swagger.io: the docs load nothing from elsewhere (CSP).
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
}

# --- Sandhub itself -------------------------------------------------------------------------
# Backend class per Host.kind, by dotted path, the way Django picks cache and mail backends.
SANDHUB_BACKENDS = {
    "docker": "hosts.backends.docker.DockerBackend",
    "ssh": "hosts.backends.ssh.backend.SshBackend",
}
SANDHUB_SANDBOX_IMAGE = env_str("SANDHUB_SANDBOX_IMAGE", "sandhub/sandbox:latest")
SANDHUB_DOCKER_URL = env_str("SANDHUB_DOCKER_URL", "unix:///var/run/docker.sock")
# Per-stream output kept for a command (head and tail); callers may ask for less, never more.
SANDHUB_OUTPUT_CAP_BYTES = env_int("SANDHUB_OUTPUT_CAP_BYTES", 1024 * 1024, minimum=1024)
SANDHUB_DEFAULT_TIMEOUT_SECONDS = env_int("SANDHUB_DEFAULT_TIMEOUT_SECONDS", 60, minimum=1)
SANDHUB_MAX_TIMEOUT_SECONDS = env_int("SANDHUB_MAX_TIMEOUT_SECONDS", 3600, minimum=1)
SANDHUB_MAX_TRANSFER_BYTES = env_int("SANDHUB_MAX_TRANSFER_BYTES", 100 * 1024 * 1024, minimum=1024)
# The pages warn about a sandbox that expires within this many minutes (0: never).
SANDHUB_EXPIRY_WARNING_MINUTES = env_int("SANDHUB_EXPIRY_WARNING_MINUTES", 15, minimum=0)
# How long a file link (a signed URL that downloads one file without a session) stays valid.
# Terminals open at once in one sandbox (sandboxes/services/terminals.py).
SANDHUB_MAX_TERMINALS_PER_SANDBOX = env_int("SANDHUB_MAX_TERMINALS_PER_SANDBOX", 5, minimum=1)
SANDHUB_FILE_LINK_SECONDS = env_int("SANDHUB_FILE_LINK_SECONDS", 3600, minimum=60)
# The egress proxy (`manage.py egressproxy`, issue 27): the only way out of a sandbox whose
# network is on. Its ports on this machine (explicit proxy and transparent HTTP/HTTPS on
# one, DNS on the other), the address it listens on, names it resolves to given addresses
# (the operator's map, "name=ip,..."; such names may be private), and an extra CA file to
# trust towards upstream servers.
SANDHUB_EGRESS_PORT = env_int("SANDHUB_EGRESS_PORT", 3128, minimum=1)
SANDHUB_EGRESS_DNS_PORT = env_int("SANDHUB_EGRESS_DNS_PORT", 8053, minimum=1)
SANDHUB_EGRESS_BIND = env_str("SANDHUB_EGRESS_BIND", "0.0.0.0")
SANDHUB_EGRESS_HOSTS = env_host_map("SANDHUB_EGRESS_HOSTS")
SANDHUB_EGRESS_UPSTREAM_CA = env_str("SANDHUB_EGRESS_UPSTREAM_CA", "")
# Previews (sandboxes/proxy/): with a domain, a sandbox's port is served at
# PORT-SANDBOX.<domain> (wildcard DNS to this server; `localhost` works in Chromium without
# DNS), each preview an origin of its own; without one, at /preview/SANDBOX/PORT/ on this
# origin, where the proxy sandboxes the app's pages (CSP) so they cannot act as the viewer.
SANDHUB_PREVIEW_DOMAIN = env_str("SANDHUB_PREVIEW_DOMAIN", "").strip(".").lower()
# Threads that carry preview traffic (one per open preview connection while it waits on the
# sandbox), apart from the pool that runs MCP and API calls.
SANDHUB_PREVIEW_THREADS = env_int("SANDHUB_PREVIEW_THREADS", 200, minimum=1)
# Each tenant's share of them (sandboxes/proxy/fairshare.py): preview connections open at once
# per sandbox and per team, per web process; past that, 503. A connection holds up to two
# threads (reading and writing at once), and one team may hold at most half the pool, so
# another team's preview always finds threads.
SANDHUB_PREVIEW_SANDBOX_CONNECTIONS = env_int("SANDHUB_PREVIEW_SANDBOX_CONNECTIONS", 20, minimum=1)
SANDHUB_PREVIEW_TEAM_CONNECTIONS = env_int("SANDHUB_PREVIEW_TEAM_CONNECTIONS", 40, minimum=1)
if SANDHUB_PREVIEW_SANDBOX_CONNECTIONS > SANDHUB_PREVIEW_TEAM_CONNECTIONS:
    raise EnvError(
        "SANDHUB_PREVIEW_SANDBOX_CONNECTIONS must not exceed SANDHUB_PREVIEW_TEAM_CONNECTIONS "
        f"({SANDHUB_PREVIEW_SANDBOX_CONNECTIONS} > {SANDHUB_PREVIEW_TEAM_CONNECTIONS})"
    )
if 2 * SANDHUB_PREVIEW_TEAM_CONNECTIONS > SANDHUB_PREVIEW_THREADS // 2:
    raise EnvError(
        f"SANDHUB_PREVIEW_TEAM_CONNECTIONS ({SANDHUB_PREVIEW_TEAM_CONNECTIONS}) x 2 threads must "
        f"fit in half of SANDHUB_PREVIEW_THREADS ({SANDHUB_PREVIEW_THREADS}): lower the cap "
        f"or raise the threads to at least {4 * SANDHUB_PREVIEW_TEAM_CONNECTIONS}"
    )
# An app that sends nothing for this long, before or while answering, is given up on (504, or
# the response cut short); a preview websocket with no message either way is closed.
SANDHUB_PREVIEW_READ_TIMEOUT_SECONDS = env_int(
    "SANDHUB_PREVIEW_READ_TIMEOUT_SECONDS", 120, minimum=1
)
SANDHUB_PREVIEW_WEBSOCKET_IDLE_SECONDS = env_int(
    "SANDHUB_PREVIEW_WEBSOCKET_IDLE_SECONDS", 600, minimum=1
)
# Housekeeping (sandboxes/housekeeping/): this deployment's name, labelled on every container
# it makes (reconciliation touches only its own); how young a container reconciliation never
# removes; the warm-pool size of images whose own size is 0.
SANDHUB_INSTANCE = env_str("SANDHUB_INSTANCE", "default") or "default"
SANDHUB_ORPHAN_GRACE_SECONDS = env_int("SANDHUB_ORPHAN_GRACE_SECONDS", 600, minimum=0)
SANDHUB_WARM_POOL_SIZE = env_int("SANDHUB_WARM_POOL_SIZE", 0, minimum=0)
# Each web process keeps a started sandbox agent in up to this many ready warm-pool members, so
# a sandbox claimed from the pool answers its first command at once (0: none; see
# sandboxes/housekeeping/poolagents.py). At most this many members per host start at once,
# counted over every worker (sandboxes/housekeeping/pool.py).
SANDHUB_POOL_AGENTS = env_int("SANDHUB_POOL_AGENTS", 200, minimum=0)
SANDHUB_POOL_STARTS_PER_HOST = env_int("SANDHUB_POOL_STARTS_PER_HOST", 4, minimum=1)
# Where loop-mounted /workspace filesystems (the per-sandbox disk limit) keep their images.
SANDHUB_DISK_DIR = Path(env_str("SANDHUB_DISK_DIR", str(VAR_DIR / "disks")))
# Where Docker hosts' snapshots keep their files (a copy of a workspace's disk image, the home
# directory's tar): on the disks' filesystem, so a copy can share blocks where it can (reflink).
SANDHUB_SNAPSHOT_DIR = Path(env_str("SANDHUB_SNAPSHOT_DIR", str(VAR_DIR / "snapshots")))
# Commands, listings and background starts go through the sandbox agent (one long-lived exec
# per sandbox) instead of one engine exec each; a host turns it off with the option agent: false.
# Images without python3 use the per-command exec path whatever this says.
SANDHUB_AGENT = env_bool("SANDHUB_AGENT", True)
# Liveness leases (sandboxes/housekeeping/liveness.py): each web process and qcluster worker
# renews its lease every third of this many seconds; one not renewed for this long belongs to
# a dead process, and the commands it was running are closed at once.
SANDHUB_LEASE_SECONDS = env_int("SANDHUB_LEASE_SECONDS", 10, minimum=3)
# Usage charts (sandboxes/housekeeping/usage.py): every running sandbox's CPU, memory, disk
# and pids sampled each this many seconds, a round waiting at most ROUND seconds for slow
# sandboxes; samples older than KEEP hours are removed.
SANDHUB_USAGE_SAMPLE_SECONDS = env_int("SANDHUB_USAGE_SAMPLE_SECONDS", 60, minimum=5)
SANDHUB_USAGE_ROUND_SECONDS = env_int("SANDHUB_USAGE_ROUND_SECONDS", 40, minimum=1)
SANDHUB_USAGE_KEEP_HOURS = env_int("SANDHUB_USAGE_KEEP_HOURS", 24, minimum=1)

# --- Agents and programs: API keys, the MCP endpoint, the REST API ---------------------------
INSTALLED_APPS += ["mcp_bridge"]
# Commands run through MCP at the same time, per web process (each holds a thread).
SANDHUB_MCP_COMMAND_THREADS = env_int("SANDHUB_MCP_COMMAND_THREADS", 100, minimum=1)
# OpenTelemetry traces of MCP calls, exported over OTLP/HTTP to OTEL_EXPORTER_OTLP_ENDPOINT
# (mcp_bridge/tracing.py, docs/tracing.md). Off by default: FastMCP's span code alone took
# 5.0% of the web workers' CPU under bench/bench_load.py (py-spy); off, 2.7%.
SANDHUB_MCP_TRACING = env_bool("SANDHUB_MCP_TRACING", False)
# Prometheus' bearer token for /metrics (docs/metrics.md); unset, the endpoint is off (404).
SANDHUB_METRICS_TOKEN = env_token("SANDHUB_METRICS_TOKEN")
# An MCP session's selected sandbox is forgotten after this many hours without use.
SANDHUB_MCP_SESSION_HOURS = env_int("SANDHUB_MCP_SESSION_HOURS", 24, minimum=1)
# REST bodies Django reads into memory (JSON, form fields) stay small; uploaded files over
# FILE_UPLOAD_MAX_MEMORY_SIZE spill to a temporary file; a whole upload (multipart or raw) may
# not exceed SANDHUB_MAX_TRANSFER_BYTES, checked before it is read. Files go to the sandbox
# as a spooled tar in chunks, so an upload costs the web process a few MB whatever its size.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("DATA_UPLOAD_MAX_MEMORY_SIZE", 4 * 1024 * 1024, minimum=1024)
DATA_UPLOAD_MAX_NUMBER_FILES = 1000
FILE_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024
# A background job's log keeps its first and last this many bytes (the true size is counted).
SANDHUB_JOB_LOG_KEEP_BYTES = env_int(
    "SANDHUB_JOB_LOG_KEEP_BYTES", 4 * 1024 * 1024, minimum=64 * 1024
)

# Rate limits and lockouts (tenants/ratelimits.py). The counters live in a database cache
# every process shares (`migrate` makes its table); the default cache is per process.
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "ratelimit": {
        "BACKEND": "tenants.ratelimits.RateLimitCache",
        "LOCATION": "sandhub_ratelimit",
        # Culling past MAX_ENTRIES drops live entries too: keep it well above the traffic.
        "OPTIONS": {"MAX_ENTRIES": 100_000},
    },
}
RATELIMIT_USE_CACHE = "ratelimit"
# Failed API-key authentications within the window, per key prefix and per source address,
# before that prefix or address is locked out (even the right key) for the lockout.
SANDHUB_AUTH_FAILURE_WINDOW_SECONDS = env_int("SANDHUB_AUTH_FAILURE_WINDOW_SECONDS", 300, minimum=1)
SANDHUB_AUTH_FAILURES_PER_KEY = env_int("SANDHUB_AUTH_FAILURES_PER_KEY", 10, minimum=1)
SANDHUB_AUTH_FAILURES_PER_ADDRESS = env_int("SANDHUB_AUTH_FAILURES_PER_ADDRESS", 30, minimum=1)
SANDHUB_AUTH_LOCKOUT_SECONDS = env_int("SANDHUB_AUTH_LOCKOUT_SECONDS", 900, minimum=1)
# Creations per action: (per API key, or per user without one; per source address; window s).
SANDHUB_CREATION_LIMITS = {
    "sandbox.create": (
        env_int("SANDHUB_SANDBOX_CREATES_PER_KEY", 30, minimum=1),
        env_int("SANDHUB_SANDBOX_CREATES_PER_ADDRESS", 60, minimum=1),
        60,
    ),
    "apikey.create": (
        env_int("SANDHUB_API_KEY_CREATES_PER_KEY", 20, minimum=1),
        env_int("SANDHUB_API_KEY_CREATES_PER_ADDRESS", 60, minimum=1),
        3600,
    ),
}
# Never limited or locked out per address (per key they are): loopback, where a reverse proxy
# on this machine without --proxy-headers makes every client look alike.
SANDHUB_RATELIMIT_EXEMPT_ADDRESSES = env_list(
    "SANDHUB_RATELIMIT_EXEMPT_ADDRESSES", ["127.0.0.1", "::1"]
)

# The tests run the web app in a thread and `manage.py mcp` in a subprocess against the test
# database, so a SQLite test database must be a file: an in-memory one is private to one
# connection. One name per test process, so parallel runs do not share it.
if DATABASES["default"]["ENGINE"] == SQLITE_ENGINE:
    import os as _os
    import tempfile as _tempfile

    DATABASES["default"].setdefault("TEST", {})["NAME"] = str(
        Path(_tempfile.gettempdir()) / f"sandhub-test-{_os.getpid()}.sqlite3"
    )
