"""A retried update answers its first record, through every runner: the sync and async Python
API and `PATCH .../items/{id}` over real HTTP (the async twin once recorded another type)."""

from __future__ import annotations

import asyncio
from urllib.parse import quote

import httpx
from server import Server

from sections.runtime.memory import Memory

SESSION = "s/1"
S = quote(SESSION, safe="")


def test_patch_retried_with_the_same_idempotency_key_answers_the_first_record(tmp_path):
    with (
        Server(tmp_path / "data", "--seg-bits", "5") as srv,
        httpx.Client(base_url=srv.url, timeout=30) as client,
    ):
        client.put(f"/v1/sessions/{S}")
        item = client.post(f"/v1/sessions/{S}/sections/findings/items", json={"content": "a"})
        url = f"/v1/sessions/{S}/sections/findings/items/{item.json()['item']['id']}"
        headers = {"Idempotency-Key": "patch-1"}
        first = client.patch(url, json={"content": "b"}, headers=headers)
        head = client.get("/v1/log/status").json()["head"]
        again = client.patch(url, json={"content": "b"}, headers=headers)
        assert first.status_code == 200, first.text
        assert again.status_code == 200, again.text
        assert again.json()["record"] == first.json()["record"]
        assert first.json()["record"]["type"] == "item.updated"
        assert client.get("/v1/log/status").json()["head"] == head


def test_update_async_retried_with_the_same_key_returns_the_first_record(tmp_path):
    with Memory.open(tmp_path / "data", seg_bits=5) as mem:
        s = mem.session("s")
        item = s.add("findings", "a")

        async def twice():
            first = await s.update_async("findings", item.id, content="b", idempotency_key="u")
            head = mem.writer.next_seq
            again = await s.update_async("findings", item.id, content="b", idempotency_key="u")
            assert mem.writer.next_seq == head
            return first, again

        first, again = asyncio.run(twice())
        assert (again.seq, again.type, again.h) == (first.seq, "item.updated", first.h)
        sync_again = s.update("findings", item.id, content="b", idempotency_key="u")
        assert sync_again.seq == first.seq
