"""Regenerate the protobuf modules of e2b_compat/proto/*.proto with grpcio-tools' protoc
(`make proto`); tests/e2b/test_protocol.py runs it into a scratch folder and compares."""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

from grpc_tools import protoc  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parents[2]  # the project: module paths start there


def generate(protos: list[str], out: Path = ROOT) -> None:
    """protoc --python_out and --pyi_out for `protos` (paths from the project's root)."""
    well_known = resources.files("grpc_tools") / "_proto"  # google/protobuf/timestamp.proto
    arguments = [
        "protoc",
        f"-I{ROOT}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        *protos,
    ]
    if protoc.main(arguments) != 0:
        raise SystemExit(f"protoc failed on {' '.join(protos)}")


if __name__ == "__main__":
    generate(sys.argv[1:])
