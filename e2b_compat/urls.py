"""The E2B-compatible endpoints under /e2b/: the control API at /e2b/ (E2B_API_URL) and envd
at /e2b/envd/ (E2B_SANDBOX_URL), or at a sandbox's own host name (routing.py)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path

from e2b_compat import control, envd, files, openapi


def openapi_document(request: HttpRequest) -> HttpResponse:
    return JsonResponse(openapi.DOCUMENT)


ID = "<str:sandbox_id>"
urlpatterns = [
    path("sandboxes", control.sandboxes),
    path("v2/sandboxes", control.sandboxes),
    path(f"sandboxes/{ID}", control.sandbox),
    path(f"sandboxes/{ID}/timeout", control.timeout),
    path(f"sandboxes/{ID}/pause", control.pause),
    path(f"sandboxes/{ID}/resume", control.resume),
    path(f"sandboxes/{ID}/connect", control.connect),
    path(f"v2/sandboxes/{ID}/connect", control.connect),
    path("openapi.json", openapi_document),
    path("envd/health", envd.health),
    path("envd/files", files.files),
    path("envd/<str:service>/<str:method>", envd.rpc),
]
