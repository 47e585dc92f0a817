"""Values as people read them: a duration in the unit that suits it ("6.5 ms", "1.2 s",
"3 min 4 s", "2 h 5 min"), not a float of seconds to the last digit.

In the contract so every interface (admin lists and pages, the team pages) shows them alike.
"""

from __future__ import annotations

NONE = "—"


def human_duration(seconds: float | None) -> str:
    """`seconds` in ms below a second, s to one decimal below a minute, then whole units."""
    if seconds is None:
        return NONE
    if seconds < 0:
        return f"-{human_duration(-seconds)}"
    if seconds < 1:
        return f"{_one_decimal(seconds * 1000)} ms"
    if seconds < 60:
        return f"{_one_decimal(seconds)} s"
    whole = round(seconds)
    if whole < 3600:
        minutes, rest = divmod(whole, 60)
        return _two_units(minutes, "min", rest, "s")
    hours, rest = divmod(whole, 3600)
    if hours < 24:
        return _two_units(hours, "h", rest // 60, "min")
    days, rest = divmod(hours, 24)
    return _two_units(days, "d", rest, "h")


def _one_decimal(value: float) -> str:
    # "6.5", but "12" rather than "12.0", and never "1000 ms" (that is "1 s": 999.96 ms rounds
    # to 1000, which the caller's unit cannot say; 999.9 is close enough).
    text = f"{min(value, 999.9):.1f}"
    return text[:-2] if text.endswith(".0") else text


def _two_units(big: int, big_unit: str, small: int, small_unit: str) -> str:
    return f"{big} {big_unit}" if small == 0 else f"{big} {big_unit} {small} {small_unit}"
