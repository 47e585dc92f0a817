"""Reading a JUnit XML report (pytest --junitxml, and most other test runners) into counts
and failures. The report comes from inside a sandbox, so it is treated as hostile: size is
bounded by the caller, and DTDs (entity expansion) are refused before parsing."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from typing import Literal, NamedTuple

from sandboxes.contract.results import TestFailure

MAX_FAILURES = 50
MAX_MESSAGE_CHARS = 1000
MAX_DETAILS_CHARS = 2000
OUTCOMES = ("passed", "failed", "errors", "skipped")


class ReportError(ValueError):
    pass


class Summary(NamedTuple):
    counts: Counter[str]  # by outcome (OUTCOMES); a missing one counts 0
    failures: list[TestFailure]  # the first MAX_FAILURES failed and erroring tests

    @property
    def total(self) -> int:
        return sum(self.counts[outcome] for outcome in OUTCOMES)


def empty() -> Summary:
    return Summary(Counter(), [])


def parse(xml: bytes) -> Summary:
    if b"<!DOCTYPE" in xml or b"<!ENTITY" in xml:
        raise ReportError("the JUnit report declares a DTD; refusing to parse it")
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as exc:
        raise ReportError(f"the JUnit report is not well-formed XML: {exc}") from exc
    summary = empty()
    for case in root.iter("testcase"):
        _count(summary, case)
    return summary


def _count(summary: Summary, case: ET.Element) -> None:
    outcome = None
    for tag in ("failure", "error", "skipped"):
        outcome = case.find(tag)
        if outcome is not None:
            break
    if outcome is None:
        summary.counts["passed"] += 1
        return
    if outcome.tag == "skipped":
        summary.counts["skipped"] += 1
        return
    kind: Literal["failure", "error"] = "failure" if outcome.tag == "failure" else "error"
    summary.counts["failed" if kind == "failure" else "errors"] += 1
    if len(summary.failures) < MAX_FAILURES:
        summary.failures.append(
            TestFailure(
                name=_name(case),
                kind=kind,
                message=(outcome.get("message") or outcome.get("type") or "")[:MAX_MESSAGE_CHARS],
                details=(outcome.text or "").strip()[:MAX_DETAILS_CHARS],
            )
        )


def _name(case: ET.Element) -> str:
    classname, name = case.get("classname") or "", case.get("name") or "?"
    return f"{classname}.{name}" if classname else name
