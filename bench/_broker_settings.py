"""The platform's settings for bench/bench_broker.py: Q_CLUSTER as deployed, except that every
result is kept (save_limit 0), so the bench can count them (250 kept by default), and `poll`
may be tried at another value (BENCH_POLL, seconds)."""

import os

from platform_site.settings import *  # noqa: F403
from platform_site.settings import Q_CLUSTER

Q_CLUSTER = {**Q_CLUSTER, "save_limit": 0}
if os.environ.get("BENCH_POLL"):
    Q_CLUSTER["poll"] = float(os.environ["BENCH_POLL"])
