"""requirements.lock is closed under dependencies, extras included, and is what is installed.

`make install` installs it with --no-deps: a requirement the lock leaves out is never
installed, and an install that resolved would depend on the registry's state that day (a
new pydantic once broke a fresh `make run`).
"""

from __future__ import annotations

import importlib.metadata

from packaging.version import Version

from scripts import check_lock


def real_requires(name: str) -> list[str] | None:
    return check_lock._installed_requires(name)


def test_the_lock_pins_every_requirement_of_every_locked_package_and_it_is_installed() -> None:
    pins = check_lock.locked_pins(check_lock.LOCK.read_text())
    found = check_lock.problems(
        check_lock.root_requirements(), pins, real_requires, check_lock._installed_version
    )
    assert found == []
    # The walk reached the extras: pydantic[email] is why email-validator is locked.
    assert "email-validator" in pins
    assert Version(importlib.metadata.version("pydantic")) == pins["pydantic"]


def test_a_requirement_reached_only_through_an_extra_that_the_lock_lacks_is_named() -> None:
    """The lock of the failed install, less email-validator: drf-pydantic asks for
    pydantic[email], and only that extra needs it (pip check would not notice)."""
    pins = check_lock.locked_pins(check_lock.LOCK.read_text())
    del pins["email-validator"]
    found = check_lock.problems(check_lock.root_requirements(), pins, real_requires)
    assert len(found) == 1
    assert found[0].startswith("email-validator")
    assert "(wanted by pydantic[email]) is not in the lock" in found[0]


def test_a_pin_a_requirement_refuses_or_an_installed_version_off_the_pin_is_named() -> None:
    requires = {"app": ["lib>=2", "tool[extra]"], "lib": [], "tool": ['dep; extra == "extra"']}
    pins = {"app": Version("1"), "lib": Version("1.5"), "tool": Version("3"), "dep": Version("1")}
    installed = {"app": Version("1"), "lib": Version("1.5"), "tool": Version("3.1")}
    found = check_lock.problems(["app"], pins, requires.get, installed.get)
    assert found == [
        "dep==1 is pinned but not installed: its requirements are unknown",
        "lib>=2 (wanted by app) does not allow the pin 1.5",
        "tool is installed at 3.1, the lock pins 3",
    ]


def test_a_marker_for_another_python_or_an_extra_nobody_asked_for_needs_nothing() -> None:
    requires = {
        "app": ['old; python_version < "3.8"', 'opt; extra == "opt"', "lib"],
        "lib": [],
    }
    pins = {"app": Version("1"), "lib": Version("1")}
    assert check_lock.problems(["app"], pins, requires.get) == []


def test_the_lock_parser_reads_pip_compile_lines_and_ignores_hashes_and_comments() -> None:
    text = (
        "#    pip-compile --generate-hashes\n"
        "Django==5.2.8 \\\n"
        "    --hash=sha256:abc\n"
        "    # via sandhub (pyproject.toml)\n"
        "typing_extensions==4.15.0 \\\n"
    )
    assert check_lock.locked_pins(text) == {
        "django": Version("5.2.8"),
        "typing-extensions": Version("4.15.0"),
    }
