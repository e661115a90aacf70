"""Every call of the REST API as a value: how to ask (a `Call`) and how to read the answer.

Pure: no sockets, no clock. The sync and the async client send the same `Call` and read the
answer with the same `finish`, so each route's path, body and headers are written once, here
(the sans-I/O shape of docs/client.md). Identifiers are percent-encoded whole (`quote(..,
safe="")`): the service routes on the raw path, so an id holding `/` stays one segment.

Every write carries an `Idempotency-Key`, made here once per logical call and sent unchanged on
each retry of it, and, when given, `If-Match` with the session version the caller expects.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import quote

import orjson

from streams.client.errors import error_for

NO_BODY = object()


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer as the parsers see it: status, lower-cased headers, the whole body."""

    status: int
    headers: Mapping[str, str]
    content: bytes


def _json(answer: Answer) -> object:
    value = orjson.loads(answer.content) if answer.content else None
    if isinstance(value, dict):
        etag = answer.headers.get("etag")
        version = _etag_version(etag)
        if version is not None and "version" not in value:
            value["version"] = version  # the session's version after the call (If-Match)
    return value


def _created(answer: Answer) -> object:
    value = _json(answer)
    if isinstance(value, dict):
        value["created"] = answer.status == 201
    return value


def _etag_version(etag: str | None) -> int | None:
    if not etag:
        return None
    text = etag.strip().removeprefix("W/").strip('"')
    return int(text) if text.isascii() and text.isdigit() else None


@dataclass(frozen=True, slots=True)
class Call:
    """One request and how to read its answer. `write`: it changes memory (and so carries an
    Idempotency-Key). A `Call` is immutable, so a retry sends exactly the same request."""

    method: str
    path: str  # already percent-encoded
    params: tuple[tuple[str, str], ...] = ()
    body: object = NO_BODY
    headers: tuple[tuple[str, str], ...] = ()
    write: bool = False
    parse: Callable[[Answer], object] = _json

    @property
    def content(self) -> bytes | None:
        return None if self.body is NO_BODY else orjson.dumps(self.body)

    @property
    def all_headers(self) -> dict[str, str]:
        found = dict(self.headers)
        if self.body is not NO_BODY:
            found["Content-Type"] = "application/json"
        return found

    @property
    def idempotency_key(self) -> str | None:
        return dict(self.headers).get("Idempotency-Key")


def finish(call: Call, answer: Answer) -> object:
    """The call's result, or its typed error (errors.py) for a refusal."""
    if answer.status >= 400:
        raise error_for(answer.status, dict(answer.headers), answer.content)
    return call.parse(answer)


def new_idempotency_key() -> str:
    return uuid.uuid4().hex


def segment(identifier: str) -> str:
    if type(identifier) is not str or not identifier:
        raise ValueError(f"an identifier must be a non-empty string, not {identifier!r}")
    return quote(identifier, safe="")


def _session_path(session: str, *rest: str) -> str:
    return "/".join(("/v1/sessions", segment(session), *rest))


def _write(
    method: str,
    path: str,
    body: object = NO_BODY,
    *,
    if_match: int | None = None,
    idempotency_key: str | None = None,
    parse: Callable[[Answer], object] = _json,
) -> Call:
    headers = [("Idempotency-Key", idempotency_key or new_idempotency_key())]
    if if_match is not None:
        if type(if_match) is not int:
            raise ValueError(f"if_match is a session version (an int), not {if_match!r}")
        headers.append(("If-Match", f'"{if_match}"'))
    return Call(method, path, body=body, headers=tuple(headers), write=True, parse=parse)


def _params(**values: object) -> tuple[tuple[str, str], ...]:
    """Query parameters, leaving out None; a list or tuple repeats the name."""
    pairs: list[tuple[str, str]] = []
    for name, value in values.items():
        if value is None:
            continue
        for one in value if isinstance(value, list | tuple) else (value,):
            pairs.append((name, str(one).lower() if isinstance(one, bool) else str(one)))
    return tuple(pairs)


def _fields(**values: object) -> dict:
    return {k: v for k, v in values.items() if v is not None}


# ---- sessions


def create_session(
    session: str,
    metadata: dict | None = None,
    sections: dict | None = None,
    *,
    idempotency_key: str | None = None,
) -> Call:
    """PUT: gets or creates the session (the answer's `created` says which; `session` is its
    info). Naturally idempotent: a retry finds the session the first try made."""
    body = _fields(metadata=metadata, sections=sections)
    return _write(
        "PUT", _session_path(session), body, idempotency_key=idempotency_key, parse=_created
    )


def get_session(session: str) -> Call:
    return Call("GET", _session_path(session))


def list_sessions(**metadata: object) -> Call:
    """The tenant's sessions in creation order, filtered by equality on creation metadata."""
    return Call("GET", "/v1/sessions", _params(**{f"metadata.{k}": v for k, v in metadata.items()}))


def end_session(
    session: str, *, if_match: int | None = None, idempotency_key: str | None = None
) -> Call:
    return _write(
        "POST", _session_path(session, "end"), if_match=if_match, idempotency_key=idempotency_key
    )


def end_turn(
    session: str, *, if_match: int | None = None, idempotency_key: str | None = None
) -> Call:
    path = _session_path(session, "turns", "end")
    return _write("POST", path, if_match=if_match, idempotency_key=idempotency_key)


def delete_session(
    session: str, *, if_match: int | None = None, idempotency_key: str | None = None
) -> Call:
    return _write(
        "DELETE", _session_path(session), if_match=if_match, idempotency_key=idempotency_key
    )


# ---- items


def add_item(
    session: str,
    section: str,
    content: object,
    *,
    if_match: int | None = None,
    idempotency_key: str | None = None,
    **fields: object,
) -> Call:
    """One item: `content` and any of tags, priority, metadata, role, kind, group... The answer
    has `record` and `item`."""
    body = {"content": content, **_fields(**fields)}
    path = _session_path(session, "sections", segment(section), "items")
    return _write("POST", path, body, if_match=if_match, idempotency_key=idempotency_key)


def add_items(
    session: str,
    section: str,
    items: Iterable[Mapping[str, object]],
    *,
    if_match: int | None = None,
    idempotency_key: str | None = None,
) -> Call:
    """A batch, one record: the answer has `record` and `items`."""
    body = {"items": [dict(item) for item in items]}
    path = _session_path(session, "sections", segment(section), "items")
    return _write("POST", path, body, if_match=if_match, idempotency_key=idempotency_key)


def get_items(
    session: str,
    section: str | None = None,
    *,
    ids: Iterable[str] | None = None,
    reader: str | None = None,
) -> Call:
    """A session's items (one section's with `section`); reads are traced by the service."""
    rest = ("items",) if section is None else ("sections", segment(section), "items")
    params = _params(id=list(ids) if ids is not None else None, reader=reader)
    return Call("GET", _session_path(session, *rest), params)


def get_item(session: str, section: str, item: str, *, reader: str | None = None) -> Call:
    path = _session_path(session, "sections", segment(section), "items", segment(item))
    return Call("GET", path, _params(reader=reader))


def update_item(
    session: str,
    section: str,
    item: str,
    *,
    if_match: int | None = None,
    idempotency_key: str | None = None,
    **fields: object,
) -> Call:
    """Changes any of content, tags, priority, metadata, kind, role."""
    path = _session_path(session, "sections", segment(section), "items", segment(item))
    return _write("PATCH", path, fields, if_match=if_match, idempotency_key=idempotency_key)


def remove_item(
    session: str,
    section: str,
    item: str,
    *,
    if_match: int | None = None,
    idempotency_key: str | None = None,
) -> Call:
    path = _session_path(session, "sections", segment(section), "items", segment(item))
    return _write("DELETE", path, if_match=if_match, idempotency_key=idempotency_key)


# ---- context, search, observations, stats


def context(
    session: str,
    *,
    budget: int | None = None,
    sections: list[str] | None = None,
    reader: str | None = None,
    idempotency_key: str | None = None,
    **extra: object,
) -> Call:
    """The assembled context (`messages`); `extra`: query, observations, summaries,
    observation_chars, facts (docs/service.md). Appends its `context.assembled` trace."""
    body = _fields(budget=budget, sections=sections, reader=reader, **extra)
    return _write("POST", _session_path(session, "context"), body, idempotency_key=idempotency_key)


def search(
    query: str,
    *,
    session: str | None = None,
    sessions: list[str] | None = None,
    sections: list[str] | None = None,
    tags: list[str] | None = None,
    since: int | str | None = None,
    until: int | str | None = None,
    top_k: int | None = None,
    reader: str | None = None,
) -> Call:
    """BM25 search over the tenant's memory, or one `session`'s; the answer has `hits`."""
    path = "/v1/search" if session is None else _session_path(session, "search")
    params = _params(
        q=query, session=sessions, section=sections, tag=tags, since=since, until=until,
        top_k=top_k, reader=reader,
    )  # fmt: skip
    return Call("GET", path, params)


def observe(
    type: str,
    title: str,
    content: object,
    *,
    tags: list[str] | None = None,
    topic_key: str | None = None,
    session: str | None = None,
    idempotency_key: str | None = None,
) -> Call:
    """An observation, tenant-wide or in `session`; the answer's `tier` says whether it was
    inserted or folded into an earlier one (the service's dedup window)."""
    body = _fields(type=type, title=title, content=content, tags=tags, topic_key=topic_key)
    path = "/v1/observations" if session is None else _session_path(session, "observations")
    return _write("POST", path, body, idempotency_key=idempotency_key)


def stats(session: str | None = None) -> Call:
    """The tenant's figures, or one session's."""
    return Call("GET", "/v1/stats" if session is None else _session_path(session, "stats"))


def log_status() -> Call:
    return Call("GET", "/v1/log/status")
