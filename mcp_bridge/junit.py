"""Reading a JUnit XML report (pytest --junitxml, and most other test runners) into counts
and failures. The report comes from inside a sandbox, so it is treated as hostile: size is
bounded by the caller, and DTDs (entity expansion) are refused before parsing."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

MAX_FAILURES = 50
MAX_MESSAGE_CHARS = 1000
MAX_DETAILS_CHARS = 2000


class ReportError(ValueError):
    pass


@dataclass
class Failure:
    name: str
    kind: str  # "failure" | "error"
    message: str
    details: str


@dataclass
class Summary:
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    failures: list[Failure] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.errors + self.skipped


def parse(xml: bytes) -> Summary:
    if b"<!DOCTYPE" in xml or b"<!ENTITY" in xml:
        raise ReportError("the JUnit report declares a DTD; refusing to parse it")
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as exc:
        raise ReportError(f"the JUnit report is not well-formed XML: {exc}") from exc
    summary = Summary()
    for case in root.iter("testcase"):
        _count(summary, case)
    return summary


def _count(summary: Summary, case: ET.Element) -> None:
    outcome = None
    for kind in ("failure", "error", "skipped"):
        outcome = case.find(kind)
        if outcome is not None:
            break
    if outcome is None:
        summary.passed += 1
        return
    if outcome.tag == "skipped":
        summary.skipped += 1
        return
    if outcome.tag == "failure":
        summary.failed += 1
    else:
        summary.errors += 1
    if len(summary.failures) < MAX_FAILURES:
        summary.failures.append(
            Failure(
                name=_name(case),
                kind=outcome.tag,
                message=(outcome.get("message") or outcome.get("type") or "")[:MAX_MESSAGE_CHARS],
                details=(outcome.text or "").strip()[:MAX_DETAILS_CHARS],
            )
        )


def _name(case: ET.Element) -> str:
    classname, name = case.get("classname") or "", case.get("name") or "?"
    return f"{classname}.{name}" if classname else name
