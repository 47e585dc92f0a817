"""The sandhub client's local side: the walk, the ignore rules, the plan, the tar streams
both ways, push/pull against a stand-in for the platform's sync endpoints, configuration.

No Django, no server: real files in tmp_path, the client's real HTTP stack (httpx) answered
by tests/client/fake_platform.py.
"""

from __future__ import annotations

import io
import os
import tarfile

import pytest
from sandhub.sync import pull, push
from sandhub.tarstream import READ_BYTES, YIELD_BYTES, TransferError, extract, tar_chunks
from sandhub.tree import DIR, FILE, LINK, Entry, Rules, plan, same_time, walk_local

from tests.client.fake_platform import SANDBOX, FakePlatform
from tests.client.helpers import T0, make_tree, snapshot, write

# --- walk and rules ------------------------------------------------------------------------


def test_walk_keeps_links_as_links_and_never_follows_them(tmp_path):
    outside = tmp_path / "outside"
    write(outside, "secret.txt", "do not read")
    root = tmp_path / "proj"
    write(root, "src/app.py", "print(1)\n", mode=0o755)
    (root / "to_outside").symlink_to(outside)
    (root / "dangling").symlink_to("nowhere")
    os.mkfifo(root / "fifo")

    entries = walk_local(root, Rules())

    assert set(entries) == {"src", "src/app.py", "to_outside", "dangling"}
    assert entries["to_outside"].kind == LINK and entries["to_outside"].target == str(outside)
    assert entries["dangling"] == Entry(
        "dangling", LINK, 0, entries["dangling"].mtime_ns, 0o777, "nowhere"
    )
    app = entries["src/app.py"]
    assert (app.kind, app.size, app.mode) == (FILE, 9, 0o755)
    assert app.mtime_ns == os.stat(root / "src/app.py").st_mtime_ns
    assert entries["src"].kind == DIR


def test_gitignore_rules_nested_negated_directory_only_and_git_always_out(tmp_path):
    root = tmp_path / "proj"
    write(root, ".gitignore", "*.log\nbuild/\n/top-only.txt\nnode_modules\n")
    write(root, "app.log")
    write(root, "build/out.bin")
    write(root, "src/build", "a file named build: only directories were ignored")
    write(root, "top-only.txt")
    write(root, "src/top-only.txt", "the pattern is anchored at the root")
    write(root, "node_modules/x/index.js")
    write(root, "src/.gitignore", "!keep.log\nlocal.tmp\n")
    write(root, "src/keep.log")
    write(root, "src/other.log")
    write(root, "src/local.tmp")
    write(root, "local.tmp", "only src/ ignores it")
    write(root, ".git/HEAD")
    write(root, "sub/.git", "gitdir: a worktree's pointer file")

    kept = set(walk_local(root, Rules()))

    assert kept == {
        ".gitignore",
        "src",
        "src/build",
        "src/top-only.txt",
        "src/.gitignore",
        "src/keep.log",
        "local.tmp",
        "sub",
    }
    everything = set(walk_local(root, Rules(gitignore=False)))
    assert {"app.log", "build/out.bin", "node_modules/x/index.js", "src/local.tmp"} <= everything
    assert not any(p == ".git" or p.startswith(".git/") or p == "sub/.git" for p in everything)


def test_excludes_win_over_gitignore_and_prune_whole_directories(tmp_path):
    root = tmp_path / "proj"
    write(root, ".gitignore", "!important.log\n")
    write(root, "important.log")
    write(root, "data/big.csv")
    write(root, "data/nested/more.csv")
    write(root, "keep.py")

    kept = set(walk_local(root, Rules(["*.log", "data/"])))

    assert kept == {".gitignore", "keep.py"}


def test_a_gitignore_that_is_a_link_is_not_read(tmp_path):
    root = tmp_path / "proj"
    write(tmp_path, "elsewhere", "*\n")
    (root).mkdir()
    (root / ".gitignore").symlink_to(tmp_path / "elsewhere")
    write(root, "a.py")
    assert set(walk_local(root, Rules())) == {".gitignore", "a.py"}


# --- plan ------------------------------------------------------------------------------------


def entry(
    path: str, kind: str = FILE, size: int = 1, mtime: int = T0, mode: int = 0o644, target: str = ""
) -> Entry:
    return Entry(path, kind, size, mtime, mode, target)


def test_same_time_to_the_nanosecond_or_second_when_one_side_has_only_seconds():
    assert same_time(T0, T0)
    assert same_time(T0, round(T0 / 1e9 * 1e9))  # through a float: ~100 ns off
    assert not same_time(T0, T0 + 5_000)
    assert same_time(T0, (T0 // 10**9) * 10**9)  # whole seconds on one side
    assert not same_time(T0, (T0 // 10**9 + 1) * 10**9)


def test_plan_sends_new_and_changed_keeps_equal_replaces_other_kinds_lists_outermost_extras():
    source = {
        e.path: e
        for e in [
            entry("same.txt"),
            entry("bigger.txt", size=2),
            entry("touched.txt", mtime=T0 + 10**9),
            entry("chmodded.sh", mode=0o755),
            entry("new.txt"),
            entry("link", LINK, 0, target="b"),
            entry("was_dir"),
            entry("newdir", DIR, 0, mode=0o755),
            entry("newdir/a.txt"),
        ]
    }
    destination = {
        e.path: e
        for e in [
            entry("same.txt", mtime=(T0 // 10**9) * 10**9),
            entry("bigger.txt"),
            entry("touched.txt"),
            entry("chmodded.sh"),
            entry("link", LINK, 0, target="a"),
            entry("was_dir", DIR, 0),
            entry("was_dir/inside.txt"),
            entry("old", DIR, 0),
            entry("old/deep", DIR, 0),
            entry("old/deep/x.txt"),
            entry("stale.txt"),
        ]
    }

    steps = plan(source, destination)

    assert [e.path for e in steps.send] == [
        "bigger.txt",
        "chmodded.sh",
        "link",
        "new.txt",
        "newdir",
        "newdir/a.txt",
        "touched.txt",
        "was_dir",
    ]
    assert steps.replace == ["was_dir"]
    assert steps.extras == ["old", "stale.txt"]  # not old/deep..., not was_dir/inside.txt
    assert steps.unchanged == 1


# --- tar streams -----------------------------------------------------------------------------


def test_tar_stream_is_a_plain_pax_tar_with_modes_exact_mtimes_and_links(tmp_path):
    root = tmp_path / "proj"
    os.utime(write(root, "bin/run.sh", "#!/bin/sh\n", mode=0o750), ns=(T0, T0))
    (root / "bin/latest").symlink_to("run.sh")
    entries = walk_local(root, Rules())

    data = b"".join(tar_chunks(root, [entries[p] for p in sorted(entries)]))

    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
        members = {m.name: m for m in archive.getmembers()}
        assert archive.extractfile(members["bin/run.sh"]).read() == b"#!/bin/sh\n"
    assert members["bin"].isdir()
    assert members["bin/run.sh"].mode == 0o750
    assert members["bin/run.sh"].pax_headers["mtime"] == "1700000000.123456789"
    assert members["bin/latest"].issym() and members["bin/latest"].linkname == "run.sh"
    assert len(data) % 512 == 0


def test_tar_stream_holds_one_buffer_at_a_time_not_the_file(tmp_path):
    root = tmp_path / "proj"
    write(root, "big.bin", os.urandom(8 * READ_BYTES + 123))
    sizes, counted = [], []
    for chunk in tar_chunks(root, [walk_local(root, Rules())["big.bin"]], counted.append):
        sizes.append(len(chunk))
    assert len(sizes) > 8 and max(sizes) <= YIELD_BYTES + READ_BYTES + 4096
    assert sum(counted) == 8 * READ_BYTES + 123


def test_extract_round_trip_is_identical_and_refuses_what_it_did_not_ask_for(tmp_path):
    source, target = tmp_path / "a", tmp_path / "b"
    os.utime(write(source, "x/data.bin", os.urandom(70_000), mode=0o600), ns=(T0, T0))
    os.utime(write(source, "x/tool", "#!", mode=0o755), ns=(T0 + 1, T0 + 1))
    (source / "x/alias").symlink_to("tool")
    entries = walk_local(source, Rules())
    wanted = {p: e for p, e in entries.items() if e.kind != DIR}
    target.mkdir()
    (target / "x").mkdir()
    (target / "x/alias").symlink_to(tmp_path / "must-not-be-written")  # replaced, not followed

    extract(iter([b"".join(tar_chunks(source, list(wanted.values())))]), target, wanted)

    assert snapshot(target) == snapshot(source) | {"x": snapshot(target)["x"]}
    assert not (tmp_path / "must-not-be-written").exists()
    with pytest.raises(TransferError, match="not asked for"):
        extract(iter([_tar("x/other.txt")]), target, wanted)
    for evil in ("../escape.txt", "/etc/evil"):
        with pytest.raises(TransferError, match="outside the sync root"):
            extract(iter([_tar(evil)]), target, {evil: entry(evil)})
    (target / "via").symlink_to(tmp_path)
    with pytest.raises(TransferError, match="not a directory"):
        extract(iter([_tar("via/file.txt")]), target, {"via/file.txt": entry("via/file.txt")})
    assert not (tmp_path / "file.txt").exists() and not (tmp_path / "escape.txt").exists()


def _tar(name: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        info = tarfile.TarInfo(name)
        info.size = 2
        archive.addfile(info, io.BytesIO(b"hi"))
    return buffer.getvalue()


# --- push and pull against the stand-in platform --------------------------------------------


@pytest.fixture
def fake(tmp_path) -> FakePlatform:
    (tmp_path / "workspace").mkdir()
    return FakePlatform(tmp_path / "workspace")


def test_push_sends_only_what_changed_in_one_tar_and_resync_is_fast(tmp_path, fake):
    local = tmp_path / "proj"
    make_tree(local, 2000)
    with fake.platform() as platform:
        first = push(platform, local, SANDBOX, "proj")
        assert len([p for p in first.sent if not p.endswith("/")]) == 2001
        assert [c.route for c in fake.calls] == ["manifest/", "sync/"]
        assert snapshot(fake.workspace / "proj") == snapshot(local)

        fake.calls.clear()
        again = push(platform, local, SANDBOX, "proj")
        assert (again.sent, again.unchanged) == ([], 2001)
        # One page, no tar: what keeps a re-sync fast (timed by bench/bench_sync.py).
        assert [c.route for c in fake.calls] == ["manifest/"]

        write(local, "pkg1/mod1.py", "changed\n")
        (local / "pkg2/mod2.py").chmod(0o700)
        write(local, "brand/new.txt", "new\n")
        fake.calls.clear()
        third = push(platform, local, SANDBOX, "proj")
        uploads = [c for c in fake.calls if c.route == "sync/"]
        assert len(uploads) == 1 and uploads[0].files == 3
        assert sorted(third.sent) == ["brand/", "brand/new.txt", "pkg1/mod1.py", "pkg2/mod2.py"]
        assert snapshot(fake.workspace / "proj") == snapshot(local)


def test_delete_dry_run_and_ignored_extras(tmp_path, fake):
    local, remote = tmp_path / "proj", fake.workspace / "proj"
    write(local, ".gitignore", ".venv/\n")
    write(local, "a.txt")
    with fake.platform() as platform:
        push(platform, local, SANDBOX, "proj")
        write(remote, "extra/deep/x.txt")
        write(remote, "stale.txt")
        write(remote, ".venv/lib/site.py")  # ignored: never deleted
        write(local, "a.txt", "changed")
        before = snapshot(remote)
        fake.calls.clear()

        dry = push(platform, local, SANDBOX, "proj", delete=True, dry_run=True)
        assert (dry.sent, dry.deleted) == (["a.txt"], ["extra", "stale.txt"])
        assert snapshot(remote) == before and [c.route for c in fake.calls] == ["manifest/"]

        push(platform, local, SANDBOX, "proj", delete=True)
        assert set(snapshot(remote)) == {
            ".gitignore",
            "a.txt",
            ".venv",
            ".venv/lib",
            ".venv/lib/site.py",
        }


def test_pull_round_trip_is_identical_and_takes_the_sandbox_gitignore(tmp_path, fake):
    local, back = tmp_path / "proj", tmp_path / "back"
    make_tree(local, 300)
    write(local, ".gitignore", "reports/tmp/\n")
    with fake.platform() as platform:
        push(platform, local, SANDBOX, "proj")
        write(fake.workspace / "proj", "reports/junit.xml", "<ok/>")
        write(fake.workspace / "proj", "reports/tmp/scratch", "ignored by the sandbox's rules")

        report = pull(platform, SANDBOX, "proj", back)
        expected = snapshot(local)
        assert snapshot(back, Rules(["reports"], gitignore=False)) == expected
        assert (back / "reports/junit.xml").read_text() == "<ok/>"
        assert not (back / "reports/tmp").exists()
        assert report.unchanged == 0

        write(back, "local-only.txt")
        write(back, "reports/tmp/mine", "ignored: kept even with delete")
        fake.calls.clear()
        again = pull(platform, SANDBOX, "proj", back, delete=True)
        assert (again.sent, again.deleted) == ([], ["local-only.txt"])
        assert (back / "reports/tmp/mine").exists() and not (back / "local-only.txt").exists()
        assert "sync/download/" in {c.route for c in fake.calls}  # the .gitignore files only
        assert max(c.files for c in fake.calls if c.route == "sync/download/") == 1


def test_pull_of_a_missing_directory_and_a_missing_sandbox_are_clear_errors(tmp_path, fake):
    from sandhub.api import ApiError
    from sandhub.sync import SyncError

    with fake.platform() as platform:
        with pytest.raises(SyncError, match="does not exist in sandbox"):
            pull(platform, SANDBOX, "nothing-here", tmp_path / "x")
        with pytest.raises(ApiError, match="sandbox sb_gone not found") as error:
            push(platform, tmp_path, "sb_gone", "proj")
        assert error.value.status == 404
    assert not (tmp_path / "x").exists()
