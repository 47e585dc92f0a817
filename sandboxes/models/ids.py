"""Public ids of the product's rows: random, never reused."""

from __future__ import annotations

import secrets
import string

_ID_ALPHABET = string.ascii_lowercase + string.digits


def new_sandbox_id() -> str:
    return "sb_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(12))


def new_pool_id() -> str:
    return "wp_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(12))


def new_link_id() -> str:
    return "lnk_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(12))


def new_snapshot_id() -> str:
    return "snap_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(12))
