"""What a scrape answers: the instruments (sandboxes/metrics) and the database's state.

With PROMETHEUS_MULTIPROC_DIR set, every web process (and a worker or egress proxy started
with the same directory) writes its counters and histograms to files there; the process
that answers reads them all and sums them, so any web worker's /metrics tells the node's
totals. A process that ended keeps its files: its counts stay in the totals (a counter that
went down would read to Prometheus as a restart). The database's figures are added once, by
the answering process.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, multiprocess
from prometheus_client.core import Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from platform_site.metrics.collector import DatabaseCollector
from sandboxes.metrics import instruments


class _ThisProcess(Collector):
    """The instruments as this process holds them (single-process mode)."""

    def collect(self) -> Iterable[Metric]:
        return instruments.REGISTRY.collect()


def registry() -> CollectorRegistry:
    scraped = CollectorRegistry(auto_describe=False)
    directory = instruments.multiprocess_dir()
    if directory:
        multiprocess.MultiProcessCollector(scraped, path=directory)
    else:
        scraped.register(_ThisProcess())
    scraped.register(DatabaseCollector())
    return scraped


def scrape(accept: str = "") -> tuple[bytes, str]:
    """The exposition in the format the scraper's Accept header asks for (OpenMetrics, or
    Prometheus' text format: 0.0.4 when it names none) and its content type."""
    encode, content_type = choose_encoder(accept)
    return encode(registry()), content_type


def process_exiting() -> None:
    """Tell the shared directory this process is gone: its live gauges (none today; a gauge
    added later may be) leave the totals. Its counters stay, as they should."""
    if instruments.multiprocess_dir():
        multiprocess.mark_process_dead(os.getpid())
