"""A runtime that agentops-core deploys is given a URL and no token, and reaches the service by
its cluster host name (issue 29): `agentops_tenant` lets such calls act for one tenant, off by
default, from loopback and `agentops_networks` only, with the no-token guards kept
(docs/agentops.md, "A runtime without a token")."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from eventstore.errors import InvalidInput
from streams.cluster.replica_sig import PRINCIPAL_HEADER
from streams.server.settings import Settings, Token, load_settings
from streams.web.app import create_app

HOST = "memory.agents.svc"
URL = f"http://{HOST}:7437"
TOKENS = (
    Token("tok-agents", "agents", frozenset({"read", "write"})),
    Token("tok-other", "other", frozenset({"read", "write"})),
)
AGENTS = {"Authorization": "Bearer tok-agents"}
OTHER = {"Authorization": "Bearer tok-other"}
POD = ("10.42.3.7", 40000)  # a pod of the cluster network
OUTSIDE = ("192.0.2.7", 40000)  # anywhere else
LOOPBACK = ("127.0.0.1", 40000)


def _settings(tmp_path, **more: object) -> Settings:
    return Settings(
        data=str(tmp_path / "data"), tokens=TOKENS, allowed_hosts=(HOST,),
        unsafe_no_fsync=True, **more,  # type: ignore[arg-type]
    ).check()  # fmt: skip


@contextlib.contextmanager
def _clients(settings: Settings) -> Iterator[dict[str, TestClient]]:
    """One client per peer address, over one app (started once, by the first)."""
    app = create_app(settings)
    peers = {"pod": POD, "outside": OUTSIDE, "loopback": LOOPBACK}
    with TestClient(app, base_url=URL, client=LOOPBACK) as started:
        clients = {name: TestClient(app, base_url=URL, client=peer) for name, peer in peers.items()}
        clients["loopback"] = started
        yield clients


def _runtime_calls(client: TestClient, sid: str) -> list[int]:
    """What the runtime does, without a token: its session, a save, the context, the end."""
    return [
        client.post("/sessions", json={"id": sid, "project": "agent"}).status_code,
        client.post("/observations", json={"session_id": sid, "type": "lesson", "title": "t",
                                           "content": f"saved by {sid}", "project": "agent"}
                    ).status_code,
        client.get("/context", params={"project": "agent", "query": "saved"}).status_code,
        client.post(f"/sessions/{sid}/end", json={}).status_code,
    ]  # fmt: skip


def test_off_by_default_a_call_without_a_token_is_401(tmp_path):
    with _clients(_settings(tmp_path)) as c:
        for peer in ("loopback", "pod"):
            answer = c[peer].post("/sessions", json={"id": "s", "project": "agent"})
            assert answer.status_code == 401, answer.text
            assert c[peer].get("/context", params={"project": "agent"}).status_code == 401


def test_on_the_runtime_reaches_the_configured_tenant_only(tmp_path):
    settings = _settings(tmp_path, agentops_tenant="agents", agentops_networks=("10.42.0.0/16",))
    with _clients(settings) as c:
        assert _runtime_calls(c["pod"], "pod-run") == [201, 201, 200, 200]
        assert _runtime_calls(c["loopback"], "local-run") == [201, 201, 200, 200]
        recent = c["pod"].get("/observations/recent", params={"project": "agent"}).json()
        assert sorted(o["content"] for o in recent) == ["saved by local-run", "saved by pod-run"]
        # the tenant's own token sees it; another tenant's does not
        mine = c["pod"].get("/observations/recent", params={"project": "agent"}, headers=AGENTS)
        assert len(mine.json()) == 2
        theirs = c["pod"].get("/observations/recent", params={"project": "agent"}, headers=OTHER)
        assert theirs.json() == []
        # AgentOps' routes only: /v1 still needs a token, and the scopes are read and write
        assert c["pod"].get("/v1/sessions/pod-run").status_code == 401
        assert c["pod"].get("/v1/sessions/pod-run", headers=AGENTS).status_code == 200


def test_on_a_call_from_a_peer_outside_the_networks_is_refused(tmp_path):
    settings = _settings(tmp_path, agentops_tenant="agents", agentops_networks=("10.42.0.0/16",))
    with _clients(settings) as c:
        answer = c["outside"].post("/sessions", json={"id": "s", "project": "agent"})
        assert answer.status_code == 401
        assert c["outside"].get("/context", params={"project": "agent"}).status_code == 401
        # loopback alone when no network is named
    with _clients(_settings(tmp_path / "b", agentops_tenant="agents")) as c:
        assert c["pod"].post("/sessions", json={"id": "s", "project": "a"}).status_code == 401
        assert c["loopback"].post("/sessions", json={"id": "s", "project": "a"}).status_code == 201


def test_on_every_no_token_protection_holds(tmp_path):
    settings = _settings(tmp_path, agentops_tenant="agents", agentops_networks=("10.42.0.0/16",))
    body = {"id": "s", "project": "agent"}
    with _clients(settings) as c:
        pod = c["pod"]
        # a token presented is judged as a token: a wrong one is no way in
        assert pod.post("/sessions", json=body, headers={"Authorization": "Bearer no"}
                        ).status_code == 401  # fmt: skip
        assert pod.post("/sessions?token=no", json=body).status_code == 401
        # a forwarding replica's headers, unsigned, are refused (not read as no credential)
        forged = {PRINCIPAL_HEADER: "other read write"}
        assert pod.post("/sessions", json=body, headers=forged).status_code == 401
        # a web page's requests: a foreign Origin, a rebinding Host, a form body
        assert pod.post("/sessions", json=body, headers={"Origin": "http://evil.example"}
                        ).status_code == 403  # fmt: skip
        assert pod.post("/sessions", json=body, headers={"Host": "evil.example"}).status_code == 421
        text = pod.post("/sessions", content=b'{"id": "s", "project": "a"}',
                        headers={"Content-Type": "text/plain"})  # fmt: skip
        assert text.status_code == 415
        # nothing of the above reached the tenant
        assert pod.get("/sessions/recent", params={"project": "agent"}).json() == []


def test_the_settings_are_checked(tmp_path):
    with pytest.raises(InvalidInput, match="agentops_networks needs agentops_tenant"):
        _settings(tmp_path, agentops_networks=("10.0.0.0/8",))
    with pytest.raises(InvalidInput, match="is not a network"):
        _settings(tmp_path, agentops_tenant="agents", agentops_networks=("ten-net",))
    with pytest.raises(InvalidInput, match="agentops_tenant must be a tenant name"):
        _settings(tmp_path, agentops_tenant="two words")
    env = {"LEDGERMEM_AGENTOPS_TENANT": "agents",
           "LEDGERMEM_AGENTOPS_NETWORKS": "10.42.0.0/16, fd00::/8"}  # fmt: skip
    loaded = load_settings(env=env)
    assert (loaded.agentops_tenant, loaded.agentops_networks) == (
        "agents", ("10.42.0.0/16", "fd00::/8")
    )  # fmt: skip
    assert load_settings(env={}).agentops_tenant is None  # off by default
