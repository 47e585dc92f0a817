"""Our protocol definitions against E2B's own: every message the SDK sends is read by ours as
the SDK meant it, and what ours answer is read by the SDK (its protobuf-py classes, from the
e2b package); and the committed modules are what `make proto` makes of the .proto files."""

from __future__ import annotations

import filecmp
import os
from pathlib import Path

from e2b.envd.filesystem import filesystem_pb as sdk_fs
from e2b.envd.process import process_pb as sdk_pb
from protobuf import Oneof

from e2b_compat.proto import filesystem_pb2 as fs
from e2b_compat.proto import generate
from e2b_compat.proto import process_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_modules_are_what_make_proto_makes(tmp_path: Path) -> None:
    protos = ["e2b_compat/proto/process.proto", "e2b_compat/proto/filesystem.proto"]
    here = os.getcwd()
    os.chdir(ROOT)
    try:
        generate.generate(protos, out=tmp_path)
    finally:
        os.chdir(here)
    for name in ("process_pb2.py", "process_pb2.pyi", "filesystem_pb2.py", "filesystem_pb2.pyi"):
        made = tmp_path / "e2b_compat" / "proto" / name
        assert filecmp.cmp(made, ROOT / "e2b_compat" / "proto" / name, shallow=False), name


def test_what_the_sdk_sends_is_read_as_it_meant() -> None:
    start = sdk_pb.StartRequest(
        process=sdk_pb.ProcessConfig(
            cmd="/bin/bash", args=["-l", "-c", "echo hi"], envs={"A": "1"}, cwd="/tmp"
        ),
        stdin=False,
        tag="web",
    )
    ours = pb.StartRequest.FromString(start.to_binary())
    assert (ours.process.cmd, list(ours.process.args)) == ("/bin/bash", ["-l", "-c", "echo hi"])
    assert dict(ours.process.envs) == {"A": "1"} and ours.process.cwd == "/tmp"
    assert ours.HasField("stdin") and not ours.stdin and ours.tag == "web"
    assert not ours.HasField("pty")

    kill = sdk_pb.SendSignalRequest(
        process=sdk_pb.ProcessSelector(selector=Oneof("pid", 42)), signal=sdk_pb.Signal.SIGKILL
    )
    ours_kill = pb.SendSignalRequest.FromString(kill.to_binary())
    assert (ours_kill.process.pid, ours_kill.signal) == (42, pb.SIGNAL_SIGKILL)

    listing = sdk_fs.ListDirRequest(path="/workspace", depth=3)
    assert pb_fields(fs.ListDirRequest.FromString(listing.to_binary())) == ("/workspace", 3)
    watch = sdk_fs.CreateWatcherRequest(path="/w", recursive=True, include_entry=True)
    ours_watch = fs.CreateWatcherRequest.FromString(watch.to_binary())
    assert (ours_watch.path, ours_watch.recursive, ours_watch.include_entry) == ("/w", True, True)


def pb_fields(request: fs.ListDirRequest) -> tuple[str, int]:
    return request.path, request.depth


def test_what_ours_answer_is_read_by_the_sdk() -> None:
    end = pb.StartResponse(
        event=pb.ProcessEvent(
            end=pb.ProcessEvent.EndEvent(exit_code=-3, exited=True, status="s", error="e")
        )
    )
    sdk_end = sdk_pb.StartResponse.from_binary(end.SerializeToString())
    oneof = sdk_end.event.event
    assert oneof.field == "end" and oneof.value.exit_code == -3 and oneof.value.error == "e"

    data = pb.ConnectResponse(
        event=pb.ProcessEvent(data=pb.ProcessEvent.DataEvent(stderr=b"\xff\x00x"))
    )
    sdk_data = sdk_pb.ConnectResponse.from_binary(data.SerializeToString()).event.event.value
    assert sdk_data.output.field == "stderr" and sdk_data.output.value == b"\xff\x00x"

    entry = fs.EntryInfo(name="a", type=fs.FILE_TYPE_DIRECTORY, path="/w/a", size=7, mode=0o40755)
    entry.modified_time.FromSeconds(1_700_000_000)
    entry.symlink_target = "/elsewhere"
    sdk_entry = sdk_fs.StatResponse.from_binary(fs.StatResponse(entry=entry).SerializeToString())
    got = sdk_entry.entry
    assert (got.name, got.path, got.size, got.mode) == ("a", "/w/a", 7, 0o40755)
    assert got.type == sdk_fs.FileType.DIRECTORY and got.symlink_target == "/elsewhere"
    assert got.modified_time.seconds == 1_700_000_000
