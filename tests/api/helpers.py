"""Helpers of the REST API's tests. Not a test module."""

from __future__ import annotations

from rest_framework.test import APIClient

API = "/api/v1"


def client_for(world, key_name: str | None) -> APIClient:
    """An in-process API client with the world's key of that name (None: no key)."""
    client = APIClient()
    if key_name:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {world.keys[key_name]}")
    return client
