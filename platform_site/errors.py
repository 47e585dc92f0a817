"""Django's error pages for what no view answered (an unknown address, a PermissionDenied or an
exception that escaped a view): under /api/ JSON in the API's `{"detail", "code"}` shape, as
its views answer (sandboxes/api/base.py); elsewhere templates/404.html, 403.html, 500.html in
the team pages' layout. Wired in platform_site/urls.py (handler404, handler403, handler500)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

API_PREFIX = "/api/"


def _api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _api(request):
        detail = f"no API endpoint at {request.path}; see /api/docs/"
        return JsonResponse({"detail": detail, "code": "not_found"}, status=404)
    return defaults.page_not_found(request, exception)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _api(request):
        detail = "you may not do this"
        return JsonResponse({"detail": detail, "code": "forbidden"}, status=403)
    return defaults.permission_denied(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """No database, no request context: the failure may be the database itself."""
    if _api(request):
        detail = "an internal error; it is logged"
        return JsonResponse({"detail": detail, "code": "error"}, status=500)
    return defaults.server_error(request)
