"""Federation tokens that expire and can be rotated (`server.auth`): an expired token is refused with a
message naming its role, cluster and expiry (never the token); a token minted without replacing keeps
the old one valid until a revoke that keeps only the new one; first use is recorded, for a rotation to
wait on; all of it survives a restart."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from gpufleet.api.errors import ValidationError
from gpufleet.server.app import create_app
from gpufleet.server.auth import TokenRegistry
from gpufleet.server.errors import UnauthorizedError
from gpufleet.store import SqliteStore

START = datetime(2026, 1, 5, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


def bearer(token: str) -> str:
    return f"Bearer {token}"


def test_an_expired_token_is_refused_naming_its_owner_and_expiry_never_the_token(tmp_path: Path) -> None:
    clock = Clock()
    tokens = TokenRegistry(tmp_path, now=clock)
    minted = tokens.mint_role("federation-worker", "w1", ttl_seconds=3600)
    assert minted.expires == START + timedelta(hours=1)
    assert tokens.role_tokens("federation-worker", "w1")[0].get("used") is None

    clock.now = START + timedelta(minutes=59)
    assert tokens.authenticate(bearer(minted.token)).cluster == "w1"
    (listed,) = tokens.role_tokens("federation-worker", "w1")
    assert listed["id"] == minted.id and listed["used"] == clock.now.isoformat(), "its first use is kept"

    clock.now = START + timedelta(hours=1)
    with pytest.raises(UnauthorizedError) as refused:
        tokens.authenticate(bearer(minted.token))
    message = str(refused.value)
    assert "the federation token of cluster w1" in message and "role federation-worker" in message
    assert "expired at 2026-01-05T01:00:00+00:00" in message and minted.token not in message
    # A restart reads the expiry back: the token stays refused.
    with pytest.raises(UnauthorizedError, match="expired at"):
        TokenRegistry(tmp_path, now=clock).authenticate(bearer(minted.token))


def test_a_token_without_ttl_never_expires(tmp_path: Path) -> None:
    clock = Clock()
    tokens = TokenRegistry(tmp_path, now=clock)
    never = tokens.mint_role("federation-manager", "w1", ttl_seconds=0)
    assert never.expires is None
    clock.now = START + timedelta(days=3650)
    assert tokens.authenticate(bearer(never.token)).role == "federation-manager"


@pytest.mark.parametrize("ttl", [-1.0, float("inf"), float("nan"), 1e20])
def test_a_ttl_no_expiry_can_be_written_for_is_refused_naming_the_field(tmp_path: Path, ttl: float) -> None:
    tokens = TokenRegistry(tmp_path, now=Clock())
    with pytest.raises(ValidationError, match="ttlSeconds") as refused:
        tokens.mint_role("federation-worker", "w1", ttl_seconds=ttl)
    assert "100 years" in str(refused.value)
    assert tokens.role_tokens("federation-worker", "w1") == []  # nothing minted


def test_a_rotation_keeps_the_old_token_until_only_the_new_one_is_kept(tmp_path: Path) -> None:
    tokens = TokenRegistry(tmp_path, now=Clock())
    old = tokens.mint_role("federation-manager", "w1", ttl_seconds=600)
    new = tokens.mint_role("federation-manager", "w1", ttl_seconds=600, replace=False)
    for token in (old, new):
        assert tokens.authenticate(bearer(token.token)).role == "federation-manager"
    assert tokens.revoke_role("federation-manager", "w1", keep=new.id) == 1
    with pytest.raises(UnauthorizedError, match="unknown token"):
        tokens.authenticate(bearer(old.token))
    assert tokens.authenticate(bearer(new.token)).role == "federation-manager"
    # `only` takes back one token (a rotation that failed half-way takes back what it minted).
    other = tokens.mint_role("federation-manager", "w1", replace=False)
    assert tokens.revoke_role("federation-manager", "w1", only=other.id) == 1
    assert [t["id"] for t in tokens.role_tokens("federation-manager", "w1")] == [new.id]


def test_the_api_mints_lists_and_revokes_with_expiry(tmp_path: Path) -> None:
    clock = Clock()
    tokens = TokenRegistry(tmp_path, now=clock)
    store = SqliteStore.open(tmp_path, synchronous="OFF")
    with store, TestClient(create_app(store, tokens)) as admin:
        admin.headers["Authorization"] = bearer(tokens.admin_token)
        body = {"role": "federation-worker", "cluster": "w1", "ttlSeconds": 86400}
        first = admin.post("/v1/tokens", json=body).json()
        second = admin.post("/v1/tokens", json={**body, "replace": False}).json()
        assert second["expires"] == (START + timedelta(days=1)).isoformat()
        listed = admin.get("/v1/tokens", params={"role": "federation-worker", "cluster": "w1"}).json()
        assert {t["id"] for t in listed["items"]} == {first["id"], second["id"]}
        assert all("token" not in t for t in listed["items"]), "a list never shows a token"

        worker = TestClient(admin.app)
        worker.headers["Authorization"] = bearer(first["token"])
        clock.now = START + timedelta(days=1, seconds=1)
        answer = worker.get("/v1/whoami")
        assert answer.status_code == 401
        assert "the federation token of cluster w1" in answer.json()["error"]["message"]
        assert "expired" in answer.json()["error"]["message"]

        params = {"role": "federation-worker", "cluster": "w1", "keep": second["id"]}
        assert admin.delete("/v1/tokens", params=params).json() == {"revoked": 1}
        refused = TestClient(admin.app).get("/v1/tokens", params=params)
        assert refused.status_code == 401, "listing tokens needs the admin token"
