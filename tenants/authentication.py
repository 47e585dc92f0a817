"""DRF authentication with API keys: `Authorization: Bearer shk_...`.

Sets request.user to the key's user and request.auth to the ApiKey row; the REST views build
the acting principal from it (tenants.apikeys.principal_for), limited to the key's scopes.
"""

from __future__ import annotations

from rest_framework import authentication, exceptions

from tenants.apikeys import authenticate, touch


class ApiKeyAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != self.keyword.lower():
            return None  # another scheme: leave it to the other authentication classes
        address = request.META.get("REMOTE_ADDR")
        key = authenticate(token.strip(), address=address)
        if key is None:
            raise exceptions.AuthenticationFailed(
                "invalid API key: it is unknown, revoked, expired, or its user has left the team"
            )
        touch(key, address)
        return key.user, key

    def authenticate_header(self, request) -> str:
        # Makes DRF answer 401 (not 403) when credentials are missing or wrong.
        return 'Bearer realm="sandhub"'
