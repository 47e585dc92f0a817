"""API-key authentication for the REST API: tenants' DRF authentication, with a locked-out
key prefix or address answered as DRF's Throttled (429 with Retry-After) rather than an
error DRF does not know (it would leave the request half-authenticated).

Loaded by DRF from the settings while rest_framework.views is still loading: import no view.
"""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.request import Request

from tenants import authentication
from tenants.ratelimits import RateLimited


class ApiKeyAuthentication(authentication.ApiKeyAuthentication):
    def authenticate(self, request: Request) -> Any:
        try:
            return super().authenticate(request)
        except RateLimited as exc:
            raise exceptions.Throttled(wait=exc.retry_after, detail=exc.message) from exc
