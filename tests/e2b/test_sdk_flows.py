"""E2B's usual flows through its own SDK: create, commands.run with streaming callbacks, a
background command and its wait, files write/read/list, kill."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.docker


def test_run_with_streaming_callbacks(sbx) -> None:
    seen: list[str] = []
    result = sbx.commands.run("echo hi; echo err >&2", on_stdout=seen.append)
    assert result.exit_code == 0 and result.stdout == "hi\n" and result.stderr == "err\n"
    assert "".join(seen) == "hi\n"


def test_files_write_read_list(sbx) -> None:
    sbx.files.write("notes/hello.txt", "hello from e2b\n")
    assert sbx.files.read("notes/hello.txt") == "hello from e2b\n"
    names = [entry.name for entry in sbx.files.list("notes")]
    assert names == ["hello.txt"]


def test_a_background_command_and_its_wait(sbx) -> None:
    handle = sbx.commands.run("sleep 1; echo done", background=True)
    assert handle.pid > 0
    running = [p.pid for p in sbx.commands.list()]
    assert handle.pid in running
    result = handle.wait()
    assert (result.exit_code, result.stdout) == (0, "done\n")
    assert handle.pid not in [p.pid for p in sbx.commands.list()]


def test_a_background_command_is_killed(sbx) -> None:
    from e2b import CommandExitException

    handle = sbx.commands.run("sleep 600", background=True)
    assert sbx.commands.kill(handle.pid) is True
    with pytest.raises(CommandExitException) as ended:
        handle.wait()
    assert ended.value.exit_code != 0
    assert sbx.commands.kill(handle.pid) is False  # over: nothing to kill


def test_a_failing_command_raises_with_its_output(sbx) -> None:
    from e2b import CommandExitException

    with pytest.raises(CommandExitException) as failed:
        sbx.commands.run("echo out; exit 3")
    assert (failed.value.exit_code, failed.value.stdout) == (3, "out\n")


def test_files_folders_moves_and_removes(sbx) -> None:
    assert sbx.files.make_dir("tree/a") is True
    assert sbx.files.make_dir("tree/a") is False  # there already
    sbx.files.write("tree/a/one.txt", b"1")
    info = sbx.files.get_info("tree/a/one.txt")
    assert (info.name, info.size, info.type.value) == ("one.txt", 1, "file")
    moved = sbx.files.rename("tree/a/one.txt", "tree/two.txt")
    assert moved.path == "/workspace/tree/two.txt"
    assert sbx.files.exists("tree/two.txt") and not sbx.files.exists("tree/a/one.txt")
    deep = sorted(entry.path for entry in sbx.files.list("tree", depth=2))
    assert deep == ["/workspace/tree/a", "/workspace/tree/two.txt"]
    sbx.files.remove("tree")
    assert not sbx.files.exists("tree")


def test_the_sandbox_is_listed_and_described(sbx, e2b_env) -> None:
    from e2b import Sandbox

    info = sbx.get_info()
    assert info.sandbox_id == sbx.sandbox_id and info.state.value == "running"
    listed = [s.sandbox_id for s in Sandbox.list().next_items()]
    assert sbx.sandbox_id in listed
    assert sbx.is_running()
    sbx.set_timeout(900)
    again = Sandbox.connect(sbx.sandbox_id)
    assert again.commands.run("echo again").stdout == "again\n"


def test_a_folder_is_watched(sbx) -> None:
    """The sync SDK polls a watcher (CreateWatcher, GetWatcherEvents, RemoveWatcher)."""
    import time

    sbx.files.make_dir("watched")
    handle = sbx.files.watch_dir("watched", include_entry=True)
    try:
        sbx.files.write("watched/new.txt", "x")
        events: list = []
        deadline = time.monotonic() + 10
        while not any(e.name == "new.txt" and e.type.value == "create" for e in events):
            assert time.monotonic() < deadline, events
            time.sleep(0.6)
            events += handle.get_new_events()
        sbx.files.remove("watched/new.txt")
        deadline = time.monotonic() + 10
        while not any(e.name == "new.txt" and e.type.value == "remove" for e in events):
            assert time.monotonic() < deadline, events
            time.sleep(0.6)
            events += handle.get_new_events()
    finally:
        handle.stop()


def test_many_files_streams_and_gzip(sbx) -> None:
    import io

    from e2b.sandbox.filesystem.filesystem import WriteEntry

    written = sbx.files.write_files(
        [WriteEntry(path="many/a.txt", data="a"), WriteEntry(path="many/b.bin", data=b"\x00b")]
    )
    assert sorted(w.path for w in written) == ["/workspace/many/a.txt", "/workspace/many/b.bin"]
    sbx.files.write("many/streamed.txt", io.BytesIO(b"from a stream\n"))
    assert b"".join(sbx.files.read("many/streamed.txt", format="stream")) == b"from a stream\n"
    sbx.files.write("many/zipped.txt", "compressed on the way\n", gzip=True)
    assert sbx.files.read("many/zipped.txt") == "compressed on the way\n"
    assert sbx.files.read("many/b.bin", format="bytes") == b"\x00b"


def test_removing_what_is_not_there_is_done_already(sbx) -> None:
    sbx.files.remove("never-there.txt")  # as envd: rm -f, not an error


def test_paused_or_past_its_timeout_is_not_running(e2b_env) -> None:
    import time

    from e2b import Sandbox

    sandbox = Sandbox.create(timeout=300)
    try:
        sandbox.pause()
        assert not sandbox.is_running()
        again = Sandbox.connect(sandbox.sandbox_id)  # resumed
        assert again.is_running() and again.commands.run("echo back").stdout == "back\n"
        again.set_timeout(1)
        time.sleep(1.5)
        assert not again.is_running()  # the sweep deletes it within the minute
    finally:
        sandbox.kill()


def test_metadata_filters_orders_and_pages(sbx, e2b_env) -> None:
    from e2b import Sandbox, SandboxQuery

    tag = {"suite": f"e2b-{sbx.sandbox_id}"}
    made = [Sandbox.create(timeout=300, metadata={**tag, "n": str(n)}) for n in range(3)]
    try:
        assert made[0].get_info().metadata == {**tag, "n": "0"}
        query = SandboxQuery(metadata=tag)
        newest_first = [s.sandbox_id for s in Sandbox.list(query=query).next_items()]
        assert newest_first == [s.sandbox_id for s in reversed(made)]
        pages, paginator = [], Sandbox.list(query=query, limit=2, order="asc")
        while paginator.has_next:
            pages.append([s.sandbox_id for s in paginator.next_items()])
        assert pages == [[made[0].sandbox_id, made[1].sandbox_id], [made[2].sandbox_id]]
        one = Sandbox.list(query=SandboxQuery(metadata={**tag, "n": "1"})).next_items()
        assert [s.sandbox_id for s in one] == [made[1].sandbox_id]
    finally:
        for sandbox in made:
            sandbox.kill()


def test_input_sent_to_a_running_command(sbx) -> None:
    handle = sbx.commands.run("cat; echo end", background=True, stdin=True)
    sbx.commands.send_stdin(handle.pid, "first\n")
    handle.send_stdin(b"second\n")
    handle.close_stdin()  # end of input: cat ends
    result = handle.wait()
    assert result.stdout == "first\nsecond\nend\n"
    from e2b import SandboxException

    with pytest.raises(SandboxException):  # started without stdin: nothing to write to
        quiet = sbx.commands.run("sleep 5", background=True)
        try:
            sbx.commands.send_stdin(quiet.pid, "x")
        finally:
            sbx.commands.kill(quiet.pid)
