"""GET /api/v1/sandboxes/{id}/metrics/ (sandboxes/api/metrics.py): series, latest values and
limits; live; viewers and read-only keys may read; another team's sandbox is not found; bad
query values are 400 in the API's error shape. In-process clients with real keys, on the
in-memory backend (tests/fake_usage.py)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from sandboxes import services
from sandboxes.housekeeping import usage
from tenants import apikeys
from tests.api.helpers import API
from tests.fake_usage import MIB

pytestmark = pytest.mark.django_db


@pytest.fixture
def sandbox(fake_backend, as_alice) -> str:
    return services.create_sandbox(as_alice, name="busy").id


@pytest.fixture
def clients(alice, victor, bob, team_a, team_b):
    def client(user, team, scopes="read,write") -> APIClient:
        made = apikeys.create_key(user, team, name="test", scopes=scopes)
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {made.plaintext}")
        return api

    return {
        "alice": client(alice, team_a),
        "alice_read": client(alice, team_a, "read"),
        "victor": client(victor, team_a),
        "bob": client(bob, team_b),
    }


def test_metrics_have_series_latest_and_limits(sandbox: str, clients) -> None:
    usage.sample_round()
    usage.sample_round()
    answer = clients["alice"].get(f"{API}/sandboxes/{sandbox}/metrics/?minutes=30")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["sandbox_id"] == sandbox and body["minutes"] == 30
    assert len(body["series"]["at"]) == 2 and body["series"]["memory_bytes"] == [10 * MIB] * 2
    assert body["latest"]["pids"] == 3 and body["limits"]["memory_bytes"] > 0
    assert body["sampled_now"] is False


@pytest.mark.parametrize("who", ["victor", "alice_read"])
def test_viewers_and_read_only_keys_may_read_live(sandbox: str, clients, who: str) -> None:
    answer = clients[who].get(f"{API}/sandboxes/{sandbox}/metrics/?live=true")
    assert answer.status_code == 200, answer.content
    assert answer.json()["sampled_now"] is True and answer.json()["latest"] is not None


def test_another_teams_sandbox_is_not_found(sandbox: str, clients) -> None:
    theirs = clients["bob"].get(f"{API}/sandboxes/{sandbox}/metrics/")
    missing = clients["bob"].get(f"{API}/sandboxes/sb_doesnotexist00/metrics/")
    assert theirs.status_code == missing.status_code == 404


@pytest.mark.parametrize("query", ["minutes=abc", "minutes=0", "minutes=99999", "live=maybe"])
def test_bad_query_values_are_400_with_detail_and_code(sandbox: str, clients, query: str) -> None:
    answer = clients["alice"].get(f"{API}/sandboxes/{sandbox}/metrics/?{query}")
    assert answer.status_code == 400, answer.content
    assert "detail" in answer.json() and "code" in answer.json()


def test_the_endpoint_is_in_the_schema() -> None:
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.validation import validate_schema

    schema = SchemaGenerator().get_schema(request=None, public=True)
    validate_schema(schema)
    get = schema["paths"]["/api/v1/sandboxes/{sandbox_id}/metrics/"]["get"]
    assert {p["name"] for p in get["parameters"]} >= {"minutes", "live"}
    ref = get["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    shape = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert {"series", "latest", "limits", "interval_seconds"} <= set(shape["properties"])
