"""The operators' Prometheus endpoint, /metrics (docs/metrics.md): who may read it
(endpoint.py), what it answers (exposition.py: the instruments of sandboxes/metrics, summed
over the web processes, and the state read from the database by collector.py), and the
timing of every HTTP request (requests.py)."""
