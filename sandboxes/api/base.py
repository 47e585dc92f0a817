"""What every REST view shares: the acting principal, errors as JSON, the schema's common parts.

Each view builds the acting principal (the API key's user, team and scopes, or a signed-in
user with their team), calls one service, and renders the result. Every error becomes JSON
`{"detail": ..., "code": ...}` with the error's HTTP status, plus `fields` for a request
body's wrong fields (errors.py).

Every refused request leaves one audit row: the services write theirs, a refused key its own
(tenants.apikeys); a request refused here before any service ran (a body that does not
validate or parse, a wrong method or media type) gets a request.refused row. Requests with
no credentials at all, and those refused by a rate limit (summarised by its own row), get
none.
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponseBase
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import exceptions, serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from sandboxes.api.errors import error_body
from sandboxes.api.serializers import ErrorSerializer
from sandboxes.contract.errors import ServiceError
from tenants import ratelimits
from tenants.apikeys import clean_address, principal_for
from tenants.models import ApiKey, Channel, Membership
from tenants.principal import Principal

ERRORS = {
    code: OpenApiResponse(ErrorSerializer, description=text)
    for code, text in [
        (400, "invalid input"),
        (403, "the role or the key's scopes do not allow it"),
        (404, "not found (another team's sandbox is not found either)"),
        (409, "quota or conflicting state"),
        (429, "too many attempts (failed authentications, creations): see Retry-After"),
        (502, "the host failed"),
    ]
}
TEAM_PARAM = OpenApiParameter(
    "team", str, description="Browser sessions: the team to act in (default: your first team)."
)


def errors(*codes: int) -> dict[int, OpenApiResponse]:
    return {code: ERRORS[code] for code in codes}


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "tenants.authentication.ApiKeyAuthentication"
    match_subclasses = True  # sandboxes.api.authentication's, which the settings name
    name = "apiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A Sandhub API key: Authorization: Bearer shk_...",
        }


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Errors as JSON `{"detail", "code"}`, with `fields` for a body's wrong fields (DRF's
    own errors reshaped: errors.py); a refusal that no service put on record gets its row
    here."""
    response = _render(exc)
    if response is None:
        response = drf_exception_handler(exc, context)
        drf_exc = _as_drf(exc)
        if response is not None and drf_exc is not None:
            response.data = error_body(drf_exc, response.data)
    if response is not None and 400 <= response.status_code < 500:
        _record_refusal(exc, context.get("request"), response)
    return response


def _render(exc: Exception) -> Response | None:
    if isinstance(exc, ratelimits.RateLimited):
        return _rate_limited(exc.message, exc.retry_after)
    if isinstance(exc, exceptions.Throttled):
        return _rate_limited(str(exc.detail), getattr(exc, "wait", None) or 1)
    if isinstance(exc, ServiceError):
        return Response({"detail": exc.message, "code": exc.code}, status=exc.http_status)
    if isinstance(exc, RequestDataTooBig):
        return Response(
            {"detail": f"the request body is too large: {exc}", "code": "too_large"},
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    return None


def _as_drf(exc: Exception) -> exceptions.APIException | None:
    """The DRF exception DRF's handler answered for `exc` (it turns Django's two into its own)."""
    if isinstance(exc, Http404):
        return exceptions.NotFound(*exc.args)
    if isinstance(exc, DjangoPermissionDenied):
        return exceptions.PermissionDenied(*exc.args)
    return exc if isinstance(exc, exceptions.APIException) else None


def _rate_limited(message: str, retry_after: float) -> Response:
    return Response(
        {"detail": message, "code": ratelimits.RateLimited.code},
        status=status.HTTP_429_TOO_MANY_REQUESTS,
        headers={"Retry-After": str(max(1, int(retry_after)))},
    )


def _record_refusal(exc: Exception, request: Request | None, response: Response) -> None:
    # No credentials: nobody to attribute it to, and anyone could fill the log. Rate limits:
    # summarised by the row their first refusal wrote.
    skipped = (exceptions.NotAuthenticated, exceptions.Throttled, ratelimits.RateLimited)
    if request is None or isinstance(exc, skipped):
        return
    watch = getattr(request, "audit_rows", None)
    acting = _acting(request)  # may authenticate, which may write the refusal's row itself
    if isinstance(exc, ServiceError):
        code, message = exc.code, exc.message
    elif isinstance(exc, exceptions.APIException):
        code, message = str(exc.default_code), str(response.data.get("detail", exc.detail))
        code = _OUTCOMES.get(code, code)
    else:  # RequestDataTooBig, Django's Http404 and PermissionDenied
        code = "too_large" if isinstance(exc, RequestDataTooBig) else "refused"
        message = str(exc)
    target = f"{request.method} {request.path}"
    ratelimits.record_refusal(acting, target, code, f"{response.status_code}: {message}", watch)


# DRF's codes as audit outcomes (at most 16 characters), named like the services' own.
_OUTCOMES = {
    "method_not_allowed": "not_allowed",
    "unsupported_media_type": "media_type",
    "permission_denied": "forbidden",
}


def _acting(request: Request) -> Principal:
    address = clean_address(request.META.get("REMOTE_ADDR"))
    try:
        if request.user.is_authenticated:
            return principal(request)
    except (exceptions.APIException, ServiceError):
        pass  # authenticating failed (and left its own row)
    return ratelimits.anonymous(Channel.API, address)


def principal(request: Request) -> Principal:
    address = clean_address(request.META.get("REMOTE_ADDR"))
    if isinstance(request.auth, ApiKey):
        return principal_for(request.auth, Channel.API, address)
    # A browser session acts in ?team=<slug>, else in the user's first team. A team the user
    # is not in gives no team at all, which the services refuse like any non-member.
    user = cast(User, request.user)  # authenticated: the views' permission says so
    memberships = Membership.objects.filter(user=user).order_by("created_at", "id")
    slug = request.query_params.get("team")
    if slug:
        memberships = memberships.filter(team__slug=slug)
    membership = memberships.select_related("team").first()
    team = membership.team if membership else None
    return Principal(user=user, team=team, channel=Channel.API, source_address=address)


class ServiceView(GenericAPIView):
    """Common ground: no queryset (the services query), list results paginated, the audit
    rows the request writes counted (see exception_handler)."""

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        with ratelimits.watching_audit_rows() as watch:
            request.audit_rows = watch  # type: ignore[attr-defined]
            return super().dispatch(request, *args, **kwargs)

    def paginated(
        self, items: list[Any], serializer_class: type[serializers.Serializer]
    ) -> Response:
        # Lists the services return paginate like querysets (LimitOffsetPagination slices).
        page: list[Any] | None = self.paginate_queryset(items)  # type: ignore[arg-type]
        return self.get_paginated_response(serializer_class(page, many=True).data)


def valid(serializer_class: type[serializers.Serializer], request: Request) -> dict[str, Any]:
    """The request body checked by `serializer_class` (a 400 answer when it is wrong)."""
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)
