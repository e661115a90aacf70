"""Issue 13, item 7: with tokens, log-wide figures need a scope of their own; a tenant sees its
own. Issue 30, item 7: that scope is `log`, never a tenant's `admin` (which erasure needs).

A real `ledgermem serve` with three tokens: two tenants that write, and an operator with the
log scope. A tenant's `/v1/log/status` and `/metrics` must not show the log's head, append
counts, fsyncs or other tenants' subscribers; they show the tenant's own figures instead.
"""

from __future__ import annotations

import time

import httpx
from server import Server

from eventstore.reader import LogReader

TOKENS = "ta:acme:read+write,tb:beta:read+write,op:acme:read+log"


def _auth(token: str) -> dict:
    return {"authorization": f"Bearer {token}"}


def test_a_tenant_sees_its_own_figures_and_only_the_log_scope_sees_the_log_wide_ones(tmp_path):
    env = {"LEDGERMEM_TOKENS": TOKENS}
    with Server(tmp_path / "d", "--unsafe-no-fsync", env=env) as server:
        acme = httpx.Client(base_url=server.url, headers=_auth("ta"), timeout=30)
        beta = httpx.Client(base_url=server.url, headers=_auth("tb"), timeout=30)
        admin = httpx.Client(base_url=server.url, headers=_auth("op"), timeout=30)
        beta_seqs = []
        assert beta.put("/v1/sessions/b1", json={}).status_code == 201
        for n in range(3):
            added = beta.post("/v1/sessions/b1/sections/findings/items", json={"content": f"{n}"})
            beta_seqs.append(added.json()["record"]["seq"])
        assert acme.put("/v1/sessions/a1", json={}).status_code == 201
        for n in range(5):
            acme.post("/v1/sessions/a1/sections/findings/items", json={"content": f"a{n}"})

        with acme.stream("GET", "/v1/stream/sse", params={"after": "0"}) as stream:
            chunks = stream.iter_bytes()  # kept: a dropped iterator would close the stream
            next(chunks)  # the subscription is open
            log_status = admin.get("/v1/log/status").json()
            for _ in range(50):
                if log_status["subscribers"]["sse"] == 1:
                    break
                time.sleep(0.1)
                log_status = admin.get("/v1/log/status").json()
            status = beta.get("/v1/log/status")
            metrics = beta.get("/metrics").text
            acme_status = acme.get("/v1/log/status").json()
        admin_metrics = admin.get("/metrics").text

    assert status.status_code == 200
    status = status.json()
    # What leaked before: the log's head and counts in a tenant's answers.
    assert status["head"] == beta_seqs[-1], "the tenant's newest record, not the log's head"
    for log_wide in (
        "ledgermem_log_head_seq",
        "ledgermem_appends_total",
        "ledgermem_fsync_seconds",
        "ledgermem_subscribers{",
        "ledgermem_records_per_fsync",
        "acme",
    ):
        assert log_wide not in metrics, f"a tenant's /metrics shows {log_wide}"
    # The operator's view: the whole log.
    assert log_status["scope"] == "log"
    assert log_status["head"] > beta_seqs[-1], "acme wrote after beta"
    assert log_status["subscribers"]["sse"] == 1
    assert "ledgermem_log_head_seq" in admin_metrics and "ledgermem_appends_total" in admin_metrics
    # A tenant's view: its own figures, nothing log-wide.
    assert status["scope"] == "tenant" and status["tenant"] == "beta"
    assert status["sessions"] == 1 and status["items"] == 3
    assert status["appends"] == 4  # session.created and three items
    assert set(status["subscribers"].values()) == {0}, "acme's stream is not beta's business"
    assert status["checkpoint"]["size"] is None
    assert status["fsync"] == {"count": None, "mean_ms": None}
    assert status["verifier"]["verified_through"] is None
    assert str(log_status["head"]) not in {str(v) for v in status.values()}
    # A subscription is itself traced on its tenant (stream.opened, issue 13 item 14), so acme's
    # appends are its records in the log up to its newest when it asked, traces included.
    acme_records = [r for r in LogReader(tmp_path / "d" / "log").records() if r.tenant == "acme"]
    assert acme_status["subscribers"]["sse"] == 1
    assert acme_status["appends"] == sum(r.seq <= acme_status["head"] for r in acme_records)
    assert acme_status["appends"] >= 6  # session.created and five items, at least
    assert 'ledgermem_tenant_appends{tenant="beta"} 4.0' in metrics
    assert 'ledgermem_tenant_items{tenant="beta"} 3.0' in metrics


def test_a_tenant_s_admin_token_reads_nothing_log_wide(tmp_path):
    """Two tenants, each with an admin token (the scope erasure needs), and an auditor with
    `log`: the admins see their own tenant's figures only, never the other's identifiers."""
    config = tmp_path / "settings.toml"
    config.write_text(
        '[[tokens]]\ntoken = "a-admin"\ntenant = "acme"\nscopes = ["read", "write", "admin"]\n'
        '[[tokens]]\ntoken = "b-admin"\ntenant = "beta"\n\n'  # no scopes: the tenant's three
        '[[tokens]]\ntoken = "auditor"\ntenant = "ops"\nscopes = ["read", "log"]\n'
    )
    with Server(tmp_path / "d", "--unsafe-no-fsync", "--config", str(config)) as server:
        a = httpx.Client(base_url=server.url, headers=_auth("a-admin"), timeout=30)
        b = httpx.Client(base_url=server.url, headers=_auth("b-admin"), timeout=30)
        auditor = httpx.Client(base_url=server.url, headers=_auth("auditor"), timeout=30)
        assert b.put("/v1/sessions/someone@example.com", json={}).status_code == 201
        assert a.put("/v1/sessions/a1", json={}).status_code == 201
        for n in range(3):
            a.post("/v1/sessions/a1/sections/findings/items", json={"content": f"a{n}"})
        # A checkpoint covers the records (entry bundles are served against it).
        for _ in range(100):
            if auditor.get("/v1/log/status").json()["checkpoint"]["size"]:
                break
            time.sleep(0.1)
        for client, tenant in ((a, "acme"), (b, "beta")):
            status = client.get("/v1/log/status").json()
            assert (status["scope"], status["tenant"]) == ("tenant", tenant)
            metrics = client.get("/metrics").text
            assert "ledgermem_log_head_seq" not in metrics
            assert "ledgermem_appends_total" not in metrics
            entries = client.get("/v1/log/tile/entries/000.p/1")
            assert entries.status_code == 403, entries.text
            assert entries.json()["error"]["code"] == "forbidden"
            assert "'log' scope" in entries.json()["error"]["message"]
        assert "someone@example.com" not in a.get("/metrics").text
        # Erasure still works with admin alone: the tenant's own data.
        erased = a.post("/v1/sessions/a1/erase", json={"all": True, "reason": "asked"})
        assert erased.status_code == 200, erased.text
        # The auditor reads the log: its status, its metrics and the entry bundles.
        status = auditor.get("/v1/log/status").json()
        assert status["scope"] == "log"
        assert "ledgermem_log_head_seq" in auditor.get("/metrics").text
        assert auditor.get("/v1/log/tile/entries/000.p/1").status_code == 200
