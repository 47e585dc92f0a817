"""Prometheus instruments the product's layers record into (issue 28).

Below everything that records (services, MCP, the web process), and free of Django: the
endpoint that exposes them, and the figures read from the database at scrape time, are in
platform_site/metrics/. docs/metrics.md lists every metric.
"""
