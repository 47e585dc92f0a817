"""Reading a /metrics exposition back in the tests of the metrics endpoint. Not a test module."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Key = tuple[str, frozenset[tuple[str, str]]]


def samples(exposition: str | bytes) -> dict[Key, float]:
    """Every sample of the exposition (parsed as Prometheus would): (name, labels) -> value."""
    text = exposition.decode() if isinstance(exposition, bytes) else exposition
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(found: dict[Key, float], name: str, **labels: str) -> float:
    """The sample's value, 0 when the exposition has no such series (a counter not yet moved)."""
    return found.get((name, frozenset(labels.items())), 0.0)


def series(found: dict[Key, float], name: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: v for (n, labels), v in found.items() if n == name}
