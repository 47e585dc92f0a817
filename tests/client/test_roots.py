"""The local MCP server's roots check alone: which local paths an agent may name."""

from __future__ import annotations

import pytest
from sandhub.roots import OutsideRoots, Roots


def test_roots_resolve_links_and_dotdot(tmp_path):
    root, outside = tmp_path / "project", tmp_path / "elsewhere"
    (root / "src").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("key")
    (root / "escape").symlink_to(outside)
    (root / "inner").symlink_to(root / "src")
    roots = Roots([root])

    assert roots.check("src") == root / "src"
    assert roots.check(str(root / "src" / "new" / "file.txt")) == root / "src/new/file.txt"
    assert roots.check("inner/x") == root / "src" / "x"  # a link that stays inside is fine
    assert roots.check(".") == root
    for refused in [
        str(outside),
        "../elsewhere/secret.txt",
        "src/../../elsewhere",
        "escape",
        "escape/secret.txt",
        "escape/not-yet/there",
        "/",
        "~",
    ]:
        with pytest.raises(OutsideRoots, match="outside the allowed roots"):
            roots.check(refused)
    # A root named through a link is itself resolved, so both spellings work.
    assert Roots([root / "inner"]).check(str(root / "src" / "a")) == root / "src" / "a"
    with pytest.raises(OutsideRoots, match="not a directory"):
        Roots([outside / "secret.txt"])
