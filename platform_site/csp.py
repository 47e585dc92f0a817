"""The Content-Security-Policy of every response of the Django app: the team pages, admin, the
REST API and its docs (settings.MIDDLEWARE). No inline script and no inline style anywhere:
the pages' scripts are files under static/ (templates carry data-* attributes, never on*=
handlers), htmx runs without eval (the htmx-config meta in templates/web/base.html), and the
API docs load their init script from a URL of their own (platform_site/urls.py).

Not here: previews (sandboxes/proxy sets their headers; they are not Django's), the MCP
endpoint (JSON, not Django's) and static files (served before Django, and no documents).
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponseBase
from django.utils.deprecation import MiddlewareMixin

HEADER = "Content-Security-Policy"
DIRECTIVES = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    # data: for the small icons stylesheets inline (Swagger UI's, admin's).
    "img-src": "'self' data:",
    "object-src": "'none'",
    "base-uri": "'self'",
    "frame-ancestors": "'none'",
    "form-action": "'self'",
}
POLICY = "; ".join(f"{name} {value}" for name, value in DIRECTIVES.items())


class ContentSecurityPolicyMiddleware(MiddlewareMixin):
    """Adds the policy to a response that has none (a view may set a stricter one)."""

    def process_response(
        self, request: HttpRequest, response: HttpResponseBase
    ) -> HttpResponseBase:
        response.headers.setdefault(HEADER, POLICY)
        return response
