"""Tree sync over REST on loopback with a real Docker sandbox, beside raw baselines of the
same run (issue 13: initial sync of 50 MB in 2,000 files >= 50 MB/s; the manifest of an
unchanged 2,000-file tree <= 0.5 s).

    .venv/bin/python bench/bench_sync.py [--files 2000] [--mb 50] [--rounds 3]

Starts uvicorn (platform_site.asgi, a separate process, as `make run` does) on a throwaway
SQLite database, creates an API key for the bench user and a Docker sandbox, and builds a
deterministic tree in memory (sizes varying around the average, pseudo-random content, modes
and nanosecond mtimes) as one pax tar. Each round, into a fresh directory of /workspace:

1. upload: POST /api/v1/sandboxes/{id}/sync/?path=... with the tar streamed in chunks (as
   the `sandhub` client sends it: no Content-Length), timed to the answer (MB/s);
2. raw extraction: the same tar on the stdin of `docker exec -i tar -x` as the sandbox user
   (the engine's exec with stdin, what any upload into a container pays at least);
3. HTTP loopback: the same body POSTed to a trivial ASGI app (uvicorn only, reads and drops
   it) and to a Django URL that answers 404 (uvicorn + Django's ASGI handler, which spools
   every body before a view runs);

then, once: the manifest of the unchanged tree, paged as the client reads it (seconds, after
one warm-up), and a download of all its files as one tar (MB/s); and the client itself
(sandhub.sync.push / pull from a local copy of the tree, in this process): an initial push, a
re-sync of the unchanged tree (it sends nothing), a pull into an empty directory. Figures are
medians of the rounds; compare ratios within one run, never absolute figures across runs.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import random
import statistics
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator

from _setup import (
    bench_instance,
    bench_principal,
    django_on_scratch_db,
    free_port,
    lift_creation_limits,
    remove_scratch,
    start_web,
    stop_web,
    sweep_containers,
)

SEND_CHUNK = 256 * 1024
MTIME_NS = 1_700_000_000_000_000_000

# The trivial endpoint: reads the whole body, answers its size.
TRIVIAL_APP = """
async def application(scope, receive, send):
    if scope["type"] != "http":
        return
    size = 0
    while True:
        message = await receive()
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": str(size).encode()})
"""


def tree_tar(files: int, total_bytes: int) -> tuple[bytes, list[str]]:
    """A pax tar of `files` files (in 40 directories) holding `total_bytes` in all, sizes
    uniform between 0 and twice the average; the same bytes every run."""
    rng = random.Random(13)
    average = total_bytes // files
    sizes = [rng.randint(0, 2 * average) for _ in range(files)]
    scale = total_bytes / sum(sizes)
    sizes = [int(size * scale) for size in sizes]
    sizes[-1] += total_bytes - sum(sizes)
    out = io.BytesIO()
    names: list[str] = []
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for directory in range(40):
            info = tarfile.TarInfo(f"pkg{directory:02d}")
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, MTIME_NS // 10**9
            archive.addfile(info)
            names.append(info.name)
        for number, size in enumerate(sizes):
            info = tarfile.TarInfo(f"pkg{number % 40:02d}/module_{number:05d}.py")
            info.size, info.mode = size, 0o755 if number % 7 == 0 else 0o644
            ns = MTIME_NS + number * 1_000_003_007
            info.mtime = ns // 10**9
            info.pax_headers = {"mtime": f"{ns // 10**9}.{ns % 10**9:09d}"}
            archive.addfile(info, io.BytesIO(rng.randbytes(size)))
            names.append(info.name)
    return out.getvalue(), names


def pieces(data: bytes) -> Iterator[bytes]:
    view = memoryview(data)
    for at in range(0, len(data), SEND_CHUNK):
        yield bytes(view[at : at + SEND_CHUNK])


def rate(size: int, seconds: float) -> str:
    return f"{size / seconds / 1e6:7.1f} MB/s  ({seconds:6.3f} s)"


def docker_extract(container: str, directory: str, data: bytes) -> float:
    """`docker exec -i` of tar -x as the sandbox user into a fresh directory: seconds."""
    from django.conf import settings

    from hosts.backends.docker.names import SANDBOX_USER

    env = dict(os.environ, DOCKER_HOST=settings.SANDHUB_DOCKER_URL)
    base = ["docker", "exec", "-u", SANDBOX_USER, container]
    subprocess.run([*base, "mkdir", "-p", directory], env=env, check=True)
    started = time.perf_counter()
    subprocess.run(
        [*base[:2], "-i", *base[2:], "tar", "-x", "-p", "--no-same-owner", "-C", directory],
        input=data,
        env=env,
        check=True,
    )
    return time.perf_counter() - started


def timed_post(http, url: str, data: bytes, **options) -> tuple[float, object]:
    started = time.perf_counter()
    answer = http.post(url, content=pieces(data), **options)
    return time.perf_counter() - started, answer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    instance = bench_instance()
    lift_creation_limits()
    scratch = django_on_scratch_db()
    import httpx2 as httpx

    from hosts.backends.docker.names import container_ref
    from sandboxes import services
    from sandboxes.models import Sandbox
    from tenants.apikeys import create_key

    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # a line per request otherwise
    principal = bench_principal(channel="api")
    key = create_key(principal.user, principal.team, name="bench").plaintext
    data, names = tree_tar(args.files, args.mb * 1_000_000)
    payload = args.mb * 1_000_000
    port, trivial_port = free_port(), free_port()
    server = start_web(port, log=scratch / "web.log")
    (scratch / "trivial_app.py").write_text(TRIVIAL_APP)
    trivial = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "trivial_app:application", "--host", "127.0.0.1",
         "--port", str(trivial_port), "--log-level", "warning"],
        cwd=scratch,
        start_new_session=True,
    )  # fmt: skip
    box = None
    try:
        box = services.create_sandbox(principal, memory_mb=1024).id
        container = container_ref(Sandbox.objects.get(public_id=box).backend_state)
        api = f"http://127.0.0.1:{port}/api/v1/sandboxes/{box}"
        http = httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=300)
        tar = {"Content-Type": "application/x-tar"}
        uploads, raws, floors, djangos = [], [], [], []
        _wait_for(http, f"http://127.0.0.1:{trivial_port}/")
        for round_ in range(args.rounds):
            seconds, answer = timed_post(
                http, f"{api}/sync/", data, params={"path": f"up{round_}"}, headers=tar
            )
            if answer.status_code != 200 or answer.json()["files"] != args.files:
                raise SystemExit(f"upload answered {answer.status_code}: {answer.text[:500]}")
            uploads.append(seconds)
            raws.append(docker_extract(container, f"/workspace/raw{round_}", data))
            seconds, answer = timed_post(http, f"http://127.0.0.1:{trivial_port}/", data)
            if answer.text != str(len(data)):
                raise SystemExit(f"the trivial app read {answer.text} bytes")
            floors.append(seconds)
            seconds, answer = timed_post(http, f"http://127.0.0.1:{port}/api/v1/nowhere/", data)
            djangos.append(seconds)

        def read_manifest() -> int:
            count, after = 0, None
            while True:
                params = {"path": "up0"} | ({"after": after} if after else {})
                page = http.get(f"{api}/manifest/", params=params).json()
                count += len(page["entries"])
                if page["next"] is None:
                    return count
                after = page["next"]

        read_manifest()  # a warm agent, as a client's second sync finds it
        manifest_seconds = []
        for _ in range(5):
            started = time.perf_counter()
            listed = read_manifest()
            manifest_seconds.append(time.perf_counter() - started)
        if listed != len(names):
            raise SystemExit(f"the manifest listed {listed} entries, not {len(names)}")

        files = [name for name in names if name.startswith("pkg") and "/" in name]
        downloads = []
        for _ in range(args.rounds):
            started, got = time.perf_counter(), 0
            with http.stream(
                "POST", f"{api}/sync/download/", json={"path": "up0", "paths": files}
            ) as answer:
                for chunk in answer.iter_bytes():
                    got += len(chunk)
            downloads.append(time.perf_counter() - started)
            if answer.status_code != 200 or got < payload:
                raise SystemExit(f"download answered {answer.status_code}, {got} bytes")

        client = client_rounds(f"http://127.0.0.1:{port}", key, box, data, scratch, args.rounds)
        median = statistics.median
        print(f"tree: {args.files} files, {payload / 1e6:.0f} MB of content, tar {len(data)} B")
        print(f"rounds: {args.rounds} (medians; min in brackets)")
        rows = [
            ("upload through POST .../sync/ (target >= 50 MB/s)", uploads),
            ("raw: docker exec -i tar -x, same tar", raws),
            ("raw: HTTP POST of the body, trivial ASGI app", floors),
            ("raw: HTTP POST of the body, Django 404", djangos),
            ("download of all files, POST .../sync/download/", downloads),
        ]
        for label, seconds in rows:
            print(f"{label:<52} {rate(payload, median(seconds))}  [{rate(payload, min(seconds))}]")
        print(
            f"{'manifest of the unchanged tree (target <= 0.5 s)':<52} "
            f"{median(manifest_seconds):7.3f} s   [{min(manifest_seconds):.3f} s]"
        )
        print("the sandhub client (sandhub.sync, as `sandhub sync` runs it, in this process):")
        for label, seconds in client[:2]:
            print(f"{label:<52} {rate(payload, median(seconds))}  [{rate(payload, min(seconds))}]")
        label, seconds = client[2]
        print(f"{label:<52} {median(seconds):7.3f} s   [{min(seconds):.3f} s]")
    finally:
        if box is not None:
            services.delete_sandbox(principal, box)
        stop_web(server)
        stop_web(trivial)
        sweep_containers(instance)
        remove_scratch(scratch)


def client_rounds(url: str, key: str, box: str, data: bytes, scratch, rounds: int) -> list:
    """The same tree pushed by the client from a local directory into a fresh remote one
    (initial sync), pushed again unchanged (re-sync: a manifest, nothing sent), and pulled
    into a fresh local directory; [(label, seconds per round)]."""
    from sandhub.api import Platform
    from sandhub.sync import pull, push

    local = scratch / "local"
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        archive.extractall(local, filter="tar")  # noqa: S202 - our own tree
    pushes, resyncs, pulls = [], [], []
    with Platform(url, key) as platform:
        for round_ in range(rounds):
            started = time.perf_counter()
            sent = push(platform, local, box, f"client{round_}", gitignore=False)
            pushes.append(time.perf_counter() - started)
            started = time.perf_counter()
            again = push(platform, local, box, f"client{round_}", gitignore=False)
            resyncs.append(time.perf_counter() - started)
            if again.sent or not sent.sent:
                raise SystemExit(f"re-sync sent {len(again.sent)} entries")
            started = time.perf_counter()
            pull(platform, box, f"client{round_}", scratch / f"pulled{round_}", gitignore=False)
            pulls.append(time.perf_counter() - started)
    return [
        ("initial push (target >= 50 MB/s)", pushes),
        ("pull into an empty directory", pulls),
        ("re-sync of the unchanged tree (target <= 0.5 s)", resyncs),
    ]


def _wait_for(http, url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            http.get(url)
            return
        except Exception:
            time.sleep(0.1)
    raise SystemExit("the trivial app did not start")


if __name__ == "__main__":
    main()
