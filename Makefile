# Sandhub. `make run` on a fresh Debian machine installs what is missing and starts the platform.
# pip uses this machine's own configuration (pip.conf, PIP_* variables): no index is named here.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Touched after a successful install: nothing to do until the lock file changes.
STAMP := $(VENV)/.sandhub-installed
# chromium: the browser tests of the web pages (tests/web/) drive Debian's package. bubblewrap,
# slirp4netns, iproute2: isolated sandboxes on the SSH hosts the tests start (ssh/isolation.py).
# nginx: the reverse proxy of docs/deploy.md, tested in front of two web processes.
SYSTEM_PACKAGES := docker.io debootstrap openssh-server sudo postgresql iptables e2fsprogs chromium \
	bubblewrap slirp4netns iproute2 nginx
# pip-tools lives in its own environment (under the ignored var/) so the locked one stays exact.
# Not named PIP_*: pip reads PIP_<option> variables from the environment, and make exports
# variables given on its command line (make lock LOCK_COMPILER=/path/to/pip-compile).
LOCK_TOOLS := var/pip-tools
LOCK_COMPILER ?= $(LOCK_TOOLS)/bin/pip-compile

# E2B's JavaScript SDK for tests/e2b/test_sdk_js.py, exactly as its lock says (npm ci resolves
# nothing); skipped, saying so, where there is no npm.
E2B_JS := tests/e2b/js
JS_STAMP := $(E2B_JS)/node_modules/.installed

.PHONY: install system-packages image migrate bootstrap run test test-fast lint lock proto

install: system-packages $(STAMP) $(JS_STAMP)

# As root, install the system packages that are missing (python3-venv too when this python3
# cannot make a virtualenv). Otherwise only say what is missing.
system-packages:
	@missing=""; \
	for pkg in $(SYSTEM_PACKAGES); do \
		dpkg-query -W -f='$${Status}' "$$pkg" 2>/dev/null | grep -q "install ok installed" \
			|| missing="$$missing $$pkg"; \
	done; \
	$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || missing="$$missing python3-venv"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" -ne 0 ]; then \
		echo "missing system packages:$$missing (run as root, or install them)" >&2; exit 0; \
	fi; \
	echo "installing system packages:$$missing"; \
	apt-get update -q; \
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing

# Exactly the lock, resolving nothing: --no-deps installs the pinned, hashed files and nothing
# else, so the install is the same whatever the registry holds that day (without --no-deps,
# pip 23 resolves an extra such as pydantic[email] to the newest release, ignoring the pin).
# `pip check` and scripts/check_lock.py then prove the lock was complete. The client
# (editable) is built by the locked setuptools, without an isolated build environment that
# would fetch the newest one.
# E2B's JavaScript SDK for tests/e2b/test_sdk_js.py, exactly as its lock says (npm ci resolves
# nothing); skipped, saying so, where there is no npm.
$(JS_STAMP): $(E2B_JS)/package-lock.json
	@if command -v npm >/dev/null; then \
		npm ci --prefix $(E2B_JS) --no-audit --no-fund --loglevel=error && touch $@; \
	else echo "no npm: E2B's JS SDK test will be skipped"; fi

$(STAMP): requirements.lock client/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing the Python environment from requirements.lock"
	$(BIN)/python -m pip install --quiet --no-deps --require-hashes -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e ./client
	@$(BIN)/python -m pip check || { \
		echo "requirements.lock is not complete: a locked package needs one it does not pin." >&2; \
		echo "Run 'make lock' to add what is missing, then 'make install' again." >&2; exit 1; }
	@# pip check does not follow extras (drf-pydantic needs pydantic[email]); this does.
	$(BIN)/python scripts/check_lock.py
	@touch $@

image: system-packages
	@scripts/ensure-docker.sh
	images/build.sh

migrate: install
	$(BIN)/python manage.py migrate --noinput

bootstrap: migrate
	$(BIN)/python manage.py bootstrap

# A fresh key for the first admin on every run, printed as the line that adds Sandhub to
# Claude Code (older keys stay valid until revoked in admin).
run: install image migrate bootstrap
	$(BIN)/python manage.py collectstatic --noinput -v 0
	@echo "Add Sandhub to Claude Code with:"
	@$(BIN)/python manage.py create_api_key --user admin --team default --name "make run" \
		--claude "http://$${SANDHUB_BIND_HOST:-127.0.0.1}:$${SANDHUB_BIND_PORT:-8000}/mcp/"
	exec scripts/run.sh

test: install image
	$(BIN)/pytest

# The tests that need no Docker engine, no sshd, no browser and no django-q cluster (the
# markers of pyproject.toml, given by each test's folder, module and fixtures in tests/).
test-fast: install
	$(BIN)/pytest -m "not docker and not sshd and not browser and not qcluster"

# Style, then the layers (import-linter contracts in pyproject.toml: imports only point down),
# then types (mypy with the Django plugin). Run from the repository root: both read
# pyproject.toml from here and import the project's packages.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

# The E2B protocol's modules from our .proto files (e2b_compat/proto/); committed, and
# tests/e2b/test_protocol.py checks they are what this makes.
PROTOS := e2b_compat/proto/process.proto e2b_compat/proto/filesystem.proto
proto: install
	$(BIN)/python -m e2b_compat.proto.generate $(PROTOS)

lock:
	@test -x $(LOCK_COMPILER) || { $(PYTHON) -m venv $(LOCK_TOOLS) && $(LOCK_TOOLS)/bin/pip install -q pip-tools; }
	$(LOCK_COMPILER) --quiet --generate-hashes --no-emit-index-url --no-emit-find-links \
		--allow-unsafe --extra dev --strip-extras --output-file requirements.lock pyproject.toml
