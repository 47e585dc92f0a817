"""First byte of a small page through the preview proxy, beside the same request made
directly inside the sandbox, in one run (issue 12: proxy p50 <= direct p50 + 10 ms).

    .venv/bin/python bench/bench_preview.py [--requests 200] [--big-mb 50]

Starts uvicorn (platform_site.asgi, a separate process, as `make run` does) on a throwaway
SQLite database under a temporary directory, creates a sandbox WITHOUT network on the local
Docker engine, deploys tests/fixtures/previews/app.py (stdlib http.server) with deploy_app,
and measures:

1. direct: inside the sandbox, a python3 loop that opens a connection to 127.0.0.1:8000 and
   times GET /hello until the status line and headers are read (time to first byte), as the
   app sees any client on its own machine;
2. proxy: this process, as a browser would, GET /preview/SANDBOX/8000/hello with the preview
   cookie over a kept-alive connection to the web process, timed until the answer's head is
   read (time to first byte). Each request opens a new stream to the app over the sandbox
   agent, as the proxy does;
3. a --big-mb download through the proxy (MB/s), beside the same file read inside the sandbox
   over loopback.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time

from _setup import (
    ROOT,
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

APP = ROOT / "tests" / "fixtures" / "previews" / "app.py"
PORT = 8000

DIRECT = """
import http.client, json, sys, time
runs = int(sys.argv[1]); seconds = []
for index in range(runs + 20):
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", %d)
    conn.request("GET", "/hello")
    answer = conn.getresponse()
    elapsed = time.perf_counter() - started
    answer.read(); conn.close()
    if index >= 20:
        seconds.append(elapsed)
print(json.dumps(seconds))
"""

DIRECT_BIG = """
import http.client, sys, time
started = time.perf_counter(); total = 0
conn = http.client.HTTPConnection("127.0.0.1", %d)
conn.request("GET", "/big.bin"); answer = conn.getresponse()
while chunk := answer.read(65536):
    total += len(chunk)
print(total, time.perf_counter() - started)
"""


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.2f} ms"


def proxy_first_bytes(url: str, cookie: str, runs: int) -> list[float]:
    import httpx2 as httpx

    seconds = []
    with httpx.Client(headers={"Cookie": cookie}) as http:
        for index in range(runs + 20):
            started = time.perf_counter()
            with http.stream("GET", url) as answer:
                elapsed = time.perf_counter() - started  # status line and headers are in
                if answer.status_code != 200:
                    raise SystemExit(f"the proxy answered {answer.status_code}")
                answer.read()
            if index >= 20:
                seconds.append(elapsed)
    return seconds


def proxy_download(url: str, cookie: str) -> tuple[int, float]:
    import httpx2 as httpx

    total, started = 0, time.perf_counter()
    with httpx.Client(headers={"Cookie": cookie}) as http, http.stream("GET", url) as answer:
        for chunk in answer.iter_bytes():
            total += len(chunk)
    return total, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--big-mb", type=int, default=50)
    args = parser.parse_args()
    instance = bench_instance()
    lift_creation_limits()
    scratch = django_on_scratch_db()
    from django.conf import settings

    from sandboxes import services
    from sandboxes.contract.results import UploadFile

    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    principal = bench_principal(channel="mcp")
    port = free_port()
    server = start_web(port, log=scratch / "web.log")
    box = None
    try:
        box = services.create_sandbox(principal, memory_mb=512).id
        services.upload_files(principal, box, [UploadFile("app.py", APP.read_bytes())])
        app = services.deploy_app(principal, box, command=f"python3 app.py {PORT}", port=PORT)
        cookie = f"{services.PREVIEW_COOKIE}={app.token}"
        base = f"http://127.0.0.1:{port}/preview/{box}/{PORT}"
        ran = services.run_command(
            principal, box, f"python3 -c '{DIRECT % PORT}' {args.requests}", timeout=300
        )
        direct = json.loads(ran.stdout)
        proxied = proxy_first_bytes(f"{base}/hello", cookie, args.requests)
        size = args.big_mb * 1_000_000
        services.run_command(principal, box, f"head -c {size} /dev/urandom > big.bin")
        inside = services.run_command(principal, box, f"python3 -c '{DIRECT_BIG % PORT}'")
        inside_bytes, inside_seconds = inside.stdout.split()
        total, seconds = proxy_download(f"{base}/big.bin", cookie)
        if total != size or int(inside_bytes) != size:
            raise SystemExit(f"short download: {total} / {inside_bytes} of {size} bytes")
        p50_direct, p50_proxy = statistics.median(direct), statistics.median(proxied)
        print(f"sandbox network: {settings.SANDHUB_DOCKER_URL} engine, network off")
        print(f"{'direct GET /hello in the sandbox, TTFB p50':<48} {ms(p50_direct)}")
        print(f"{'through the preview proxy, TTFB p50':<48} {ms(p50_proxy)}")
        p95_proxy = sorted(proxied)[int(0.95 * len(proxied))]
        print(f"{'through the preview proxy, TTFB p95':<48} {ms(p95_proxy)}")
        print(f"{'proxy over direct (target <= 10 ms)':<48} {ms(p50_proxy - p50_direct)}")
        loopback_rate = size / float(inside_seconds) / 1e6
        print(
            f"{f'{args.big_mb} MB inside the sandbox over loopback':<48} {loopback_rate:7.1f} MB/s"
        )
        print(
            f"{f'{args.big_mb} MB through the preview proxy':<48} {size / seconds / 1e6:7.1f} MB/s"
        )
    finally:
        if box is not None:
            services.delete_sandbox(principal, box)
        stop_web(server)
        sweep_containers(instance)
        remove_scratch(scratch)


if __name__ == "__main__":
    main()
