"""The two memories behind the MCP tools (streams/mcp/mcp_tools.py): one in this process, or a
running service over its REST API. Each call is the one the REST route makes (or the request it
answers), so both give the same records and the same JSON; refusals come back as
`mcp_tools.Refusal` with the REST API's code and message.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import orjson

from eventstore.errors import LedgerError
from sections.errors import SessionNotFound
from sections.model.item_filter import NO_FILTER
from sections.model.render import DEFAULT_CONTEXT_BUDGET
from sections.retrieval.observations import Observation
from sections.retrieval.views import Extra
from sections.runtime.memory import Memory
from sections.specs import command_specs as specs
from streams.mcp.mcp_tools import USER_ID, Refusal, refusal_of
from streams.web.errors import ApiError


def _plain(value: object) -> Any:
    """As JSON would carry it (tuples as lists, ...): what the HTTP backend gets too."""
    return orjson.loads(orjson.dumps(value))


@contextlib.contextmanager
def _refusals() -> Iterator[None]:
    try:
        yield
    except LedgerError as exc:
        raise refusal_of(exc) from None
    except ApiError as exc:  # the service's own refusals (shutting down, no leader here)
        raise Refusal(exc.code, exc.message) from None


class EmbeddedBackend:
    """A tenant of a `Memory` in this process: `ledgermem mcp --data DIR`, or the service's own
    memory behind /mcp. `writing` wraps every call that appends (the service counts its
    in-flight writes so that shutdown waits for them and refuses new ones)."""

    def __init__(
        self,
        memory: Memory,
        tenant: str,
        writing: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    ) -> None:
        self.memory = memory
        self.tenant = tenant
        self.writing = writing

    async def session_metadata(self, session: str) -> dict | None:
        try:
            return self.memory.session_info(self.tenant, session)["metadata"]
        except SessionNotFound:
            return None

    async def open_session(self, session: str, user: str | None) -> None:
        metadata = {USER_ID: user} if user is not None else None
        with _refusals(), self.writing():
            config = self.memory.config.with_overrides(None)
            await self.memory.run_async(
                specs.GET_OR_CREATE_SESSION, self.tenant, session, (config, metadata)
            )

    async def observe(
        self, session: str, scope: str, user: str | None, observation: Observation
    ) -> dict:
        o = observation
        where: dict[str, Any] = {"session": session}
        if scope != "session":
            where = {"from_session": session, "user": user if scope == "user" else None}
        with _refusals(), self.writing():
            outcome = await self.memory.observe_async(
                o.type, o.title, o.content, tags=list(o.tags), topic_key=o.topic_key,
                tenant=self.tenant, **where,
            )  # fmt: skip
        return {"id": outcome.id, "session": outcome.session, "tier": outcome.tier,
                "revision": outcome.revision, "duplicates": outcome.duplicates}  # fmt: skip

    async def search(self, query: str, top_k: int, user: str | None) -> list[dict]:
        with _refusals(), self.writing():  # hits are reads: they append
            hits = await self.memory.search_async(query, tenant=self.tenant, top_k=top_k, user=user)
        return _plain([hit.to_json() for hit in hits])

    async def context(self, session: str, extra: Extra) -> list[dict]:
        with _refusals(), self.writing():
            _record, messages = await self.memory.run_async(
                specs.ASSEMBLE_CONTEXT,
                self.tenant,
                session,
                (DEFAULT_CONTEXT_BUDGET, [], "agent", extra),
            )
        return _plain(messages)

    async def session_info(self, session: str) -> dict:
        with _refusals():
            info = self.memory.session_info(self.tenant, session)
            info["sections"] = self.memory.session_sections(self.tenant, session)
        return _plain(info)

    async def section_items(self, session: str, section: str) -> list[dict]:
        with _refusals(), self.writing():
            self.memory.require_session(self.tenant, session)
            views = await self.memory.run_async(
                specs.READ_ITEMS, self.tenant, session, (section, None, "agent", NO_FILTER)
            )
        return _plain([view.to_json() for view in views])


class HttpBackend:
    """A running service's REST API as one token's tenant (`ledgermem mcp --url U --token T`):
    the token decides the tenant and scopes there, exactly as for any other client."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 60) -> None:
        import httpx  # the `mcp` extra installs it; only this backend needs it

        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.AsyncClient(base_url=self.url, headers=headers, timeout=timeout)
        self._transport_error = httpx.TransportError

    async def aclose(self) -> None:
        await self.client.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> dict:
        try:
            response = await self.client.request(method, path, **kwargs)
        except self._transport_error as exc:
            raise Refusal(
                "unavailable", f"the service at {self.url} did not answer: {exc}"
            ) from None
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code >= 400:
            error = body.get("error") if isinstance(body, dict) else None
            if isinstance(error, dict):
                raise Refusal(str(error.get("code")), str(error.get("message")))
            raise Refusal("http_error", f"the service answered {response.status_code}")
        if not isinstance(body, dict):
            raise Refusal("http_error", f"the service answered {method} {path} without JSON")
        return body

    @staticmethod
    def _session(session: str) -> str:
        return "/v1/sessions/" + quote(session, safe="")

    async def session_metadata(self, session: str) -> dict | None:
        try:
            return (await self._call("GET", self._session(session)))["metadata"]
        except Refusal as exc:
            if exc.code == "not_found":
                return None
            raise

    async def open_session(self, session: str, user: str | None) -> None:
        body = {"metadata": {USER_ID: user}} if user is not None else None
        await self._call("PUT", self._session(session), json=body)

    async def observe(
        self, session: str, scope: str, user: str | None, observation: Observation
    ) -> dict:
        # the session's route: scope `user` is the session's own user (`user` here, checked)
        o = observation
        body = {"type": o.type, "title": o.title, "content": o.content, "tags": list(o.tags),
                "topic_key": o.topic_key, "scope": scope}  # fmt: skip
        return await self._call("POST", self._session(session) + "/observations", json=body)

    async def search(self, query: str, top_k: int, user: str | None) -> list[dict]:
        params: dict[str, Any] = {"q": query, "top_k": top_k}
        if user is not None:
            params["user"] = user
        return (await self._call("GET", "/v1/search", params=params))["hits"]

    async def context(self, session: str, extra: Extra) -> list[dict]:
        body = {"budget": DEFAULT_CONTEXT_BUDGET, "sections": [], "observations": extra.observations,
                "summaries": extra.summaries, "query": extra.query, "recall": extra.recall}  # fmt: skip
        found = await self._call("POST", self._session(session) + "/context", json=body)
        return found["messages"]

    async def session_info(self, session: str) -> dict:
        return await self._call("GET", self._session(session))

    async def section_items(self, session: str, section: str) -> list[dict]:
        path = self._session(session) + "/sections/" + quote(section, safe="") + "/items"
        return (await self._call("GET", path))["items"]
