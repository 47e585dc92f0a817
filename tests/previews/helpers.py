"""Helpers of the previews' tests: the app a fake sandbox's port answers with, and a preview
asked for and read through the services. Not a test module."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler

from sandboxes import services
from sandboxes.services import PreviewRequest

PAGE = b"hello from the app\n"


class PageApp(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: object) -> None:
        pass


def ask(sandbox_id: str, port: int = 8000, **given) -> PreviewRequest:
    values = {"user_id": None, "session_key": None, "token": None, "address": "10.0.0.9"}
    return PreviewRequest(sandbox_id=sandbox_id, port=port, **{**values, **given})


def http_get(grant) -> bytes:
    with services.open_preview_stream(grant, timeout=5) as stream:
        stream.write(b"GET / HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n")
        stream.close_write()
        answer = b""
        while chunk := stream.read(65536, timeout=5):
            answer += chunk
    return answer
