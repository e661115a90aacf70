"""Issue 13 items 8 and 9: one nesting limit for every payload and every JSON text from outside,
and JSON text in UTF-8 only.

Whatever the API accepts must go through every later path (search index, snapshots, `state_at`,
a rebuild from the log, `ledgermem state`); whatever it refuses is a typed error (Python) or a
400 naming the problem (HTTP, WebSocket) with nothing appended.
"""

from __future__ import annotations

import asyncio
import itertools
import json

import httpx
import orjson
import pytest
from helpers.cli import ledgermem
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server import Server
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from eventstore import jcs
from eventstore.checkpoint import SigningKey
from eventstore.entry import Entry
from eventstore.errors import InvalidInput, InvalidPayload
from eventstore.jcs import MAX_DEPTH, TooDeep
from eventstore.verify import verify_log
from eventstore.writer import Durability, LogWriter
from sections.runtime.memory import Memory

# An item's content sits three levels into its record's payload: {"items": [{"content": ...}]}.
CONTENT_DEPTH = MAX_DEPTH - 3
LIMIT_NAMED = f"nested deeper than the limit of {MAX_DEPTH} levels"


def nested(depth: int, leaf: object = "needle") -> object:
    value = leaf
    for level in range(depth):
        value = {"k": value} if level % 2 else [value]
    return value


def lists(depth: int, leaf: object = "needle") -> object:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def nested_text(depth: int, leaf: str = "needle") -> str:
    return "[" * depth + json.dumps(leaf) + "]" * depth


def _with(template: str, text: str) -> str:
    return template.replace("DEEP", text)


# ---- the limit itself -------------------------------------------------------------------------


def test_the_limit_counts_arrays_and_objects_the_outermost_as_one():
    jcs.check_value(nested(MAX_DEPTH))
    with pytest.raises(TooDeep) as refused:
        jcs.check_value(nested(MAX_DEPTH + 1))
    assert refused.value.limit == MAX_DEPTH and LIMIT_NAMED in str(refused.value)
    assert isinstance(refused.value, InvalidPayload) and isinstance(refused.value, InvalidInput)
    assert jcs.loads_strict(nested_text(MAX_DEPTH)) == lists(MAX_DEPTH)
    with pytest.raises(TooDeep, match=LIMIT_NAMED):
        jcs.loads_strict(nested_text(MAX_DEPTH + 1))


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 256, 1_000, 100_000])
def test_loads_strict_refuses_deep_text_with_the_typed_error_never_a_recursion_error(depth):
    with pytest.raises(TooDeep, match=LIMIT_NAMED):
        jcs.loads_strict(nested_text(depth).encode())


def test_a_cyclic_value_is_too_deep_rather_than_a_recursion_error():
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(TooDeep):
        jcs.check_value(cycle)


# ---- UTF-8 only (item 9) ----------------------------------------------------------------------

BODY = '{"content": "x é 😀"}'
ENCODED_OTHERWISE = {
    "utf-8 with a BOM": b"\xef\xbb\xbf" + BODY.encode(),
    "utf-16 with a BOM": BODY.encode("utf-16"),
    "utf-16-le": BODY.encode("utf-16-le"),
    "utf-16-be": BODY.encode("utf-16-be"),
    "utf-32": BODY.encode("utf-32"),
    "latin-1": BODY.replace(" 😀", "").encode("latin-1"),
}


@pytest.mark.parametrize("name", sorted(ENCODED_OTHERWISE))
def test_loads_strict_takes_utf8_without_a_bom_only(name):
    with pytest.raises(InvalidPayload, match="UTF-8|byte order mark"):
        jcs.loads_strict(ENCODED_OTHERWISE[name])


def test_loads_strict_still_takes_utf8_and_refuses_a_bom_in_text():
    assert jcs.loads_strict(BODY.encode()) == {"content": "x é 😀"}
    assert jcs.loads_strict(BODY) == {"content": "x é 😀"}
    with pytest.raises(InvalidPayload, match="byte order mark"):
        jcs.loads_strict("\ufeff" + BODY)


# ---- the Python API ---------------------------------------------------------------------------


@pytest.fixture
def memory(tmp_path):
    m = Memory.open(tmp_path / "data", durability=Durability.UNSAFE_NO_FSYNC)
    yield m
    m.close()


@pytest.mark.parametrize("depth", [MAX_DEPTH, 254, 256, 1_000, 100_000])
def test_every_python_write_path_raises_too_deep_and_appends_nothing(memory, depth):
    s = memory.session("deep")
    kept = s.add("findings", "kept")
    size = memory.writer.size
    attempts = [
        lambda: s.add("findings", nested(depth)),
        lambda: s.add("findings", "x", metadata={"m": nested(depth)}),
        lambda: s.add_many("findings", [{"content": nested(depth)}]),
        lambda: s.update("findings", kept.id, content=nested(depth)),
        lambda: memory.session("other", metadata={"m": nested(depth)}),
    ]
    for attempt in attempts:
        with pytest.raises(TooDeep, match=LIMIT_NAMED):
            attempt()
    assert memory.writer.size == size
    assert s.add("findings", nested(CONTENT_DEPTH)).content == nested(CONTENT_DEPTH)


# Random nestings of arrays and objects, with scalars beside the spine, of any depth up to beyond
# the limit; the deepest leaf holds a word only that example uses, so search must find it.
_scalars = st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=5)
_words = itertools.count()


@st.composite
def nestings(draw, max_depth: int) -> tuple[object, int, str]:
    depth = draw(st.integers(1, max_depth))
    word = f"deepword{next(_words)}"
    value: object = f"{word} at the bottom"
    for _ in range(depth):
        siblings = draw(st.lists(_scalars, max_size=2))
        if draw(st.booleans()):
            key = draw(st.text(st.characters(codec="utf-8"), max_size=4))
            value = {f"s{i}": v for i, v in enumerate(siblings)} | {key: value}
        else:
            at = draw(st.integers(0, len(siblings)))
            value = [*siblings[:at], value, *siblings[at:]]
    return value, depth, word


@pytest.fixture(scope="module")
def deep_memory(tmp_path_factory):
    root = tmp_path_factory.mktemp("deep") / "data"
    m = Memory.open(root, durability=Durability.UNSAFE_NO_FSYNC)
    yield root, m
    m.close()  # a no-op once the test below has closed it


@given(nestings(CONTENT_DEPTH + 40))
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_whatever_the_api_accepts_goes_through_search_snapshots_and_state_at(deep_memory, drawn):
    _, m = deep_memory
    content, depth, word = drawn
    s = m.session("prop")
    size = m.writer.size
    if depth > CONTENT_DEPTH:
        with pytest.raises(TooDeep, match=LIMIT_NAMED):
            s.add("findings", content, tags=["deep"])
        assert m.writer.size == size, "a refused payload appended something"
        return
    item = s.add("findings", content, tags=["deep"])
    assert item.content == content
    hits = s.search(word)
    assert [hit.item.id for hit in hits] == [item.id]
    assert hits[0].item.content == content
    m.snapshot()
    seq = m.writer.size - 1
    then = m.state_at(seq)
    assert orjson.loads(orjson.dumps(then.to_json()))["seq"] == then.seq
    assert then.state_hash() == m.state_hash()


def test_after_the_property_the_log_rebuilds_reopens_and_the_cli_reads_it(deep_memory):
    root, m = deep_memory
    before = m.state_hash()
    assert m.rebuild(use_snapshots=False).state_hash() == before
    m.close()
    reopened = Memory.open(root, durability=Durability.UNSAFE_NO_FSYNC)
    try:
        assert reopened.search_index_source == "snapshot"
        assert reopened.state_hash() == before
        head = reopened.writer.size - 1
    finally:
        reopened.close()
    for at in (head, head // 2):
        shown = ledgermem("state", root / "log", "--at", at)
        assert shown.returncode == 0, shown.stderr
        json.loads(shown.stdout)


def test_a_deep_payload_written_before_the_limit_still_verifies_and_reopens(tmp_path):
    """The limit is for input: the format has none, and a log holding a deeper payload (as an
    earlier version could write) verifies and opens."""
    key = SigningKey.generate("deep.example/log")
    log = LogWriter.open(tmp_path / "log", key, durability=Durability.UNSAFE_NO_FSYNC)
    # A float that orjson does not write as JCS sends the verifier down its strict path; past 255
    # levels orjson cannot even parse the line.
    earlier = []
    for depth in (200, 300):
        payload = {"content": nested(depth, 1e-7)}
        entry = Entry.__new__(Entry)
        entry.tenant, entry.session, entry.section, entry.type = "t", "s", "x", "item.kept"
        entry.payload, entry.jcs = payload, jcs.jcs_reference(payload)
        earlier.append(entry)
    log.append_batch(earlier)
    log.close()
    report = verify_log(tmp_path / "log", key.vkey)
    assert getattr(report.verdict, "value", report.verdict) == "VALID-LOCAL", report.error
    LogWriter.open(tmp_path / "log", key, durability=Durability.UNSAFE_NO_FSYNC).close()


# ---- HTTP and WebSocket -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("http") / "data", "--unsafe-no-fsync") as srv:
        yield srv


def _head(url: str) -> int:
    return httpx.get(url + "/v1/log/status").json()["head"]


JSON_TYPE = {"content-type": "application/json"}


def _post(url: str, path: str, body: bytes) -> httpx.Response:
    return httpx.post(url + path, content=body, headers=JSON_TYPE, timeout=60)


@pytest.mark.parametrize("depth", [MAX_DEPTH, 251, 256, 1_000, 100_000])
def test_a_deep_body_is_a_400_naming_the_limit_and_appends_nothing(server, depth):
    url = server.url
    assert httpx.put(url + "/v1/sessions/deep").status_code in (200, 201)
    head = _head(url)
    bodies = [
        (
            "/v1/sessions/deep/sections/findings/items",
            _with('{"content": DEEP}', nested_text(depth)),
        ),
        ("/v1/sessions/deeper", _with('{"metadata": {"m": DEEP}}', nested_text(depth))),
        (
            "/v1/observations",
            _with('{"type": "t", "title": "t", "content": DEEP}', nested_text(depth)),
        ),
    ]
    for path, body in bodies:
        method = "PUT" if path == "/v1/sessions/deeper" else "POST"
        answer = httpx.request(
            method, url + path, content=body.encode(), headers=JSON_TYPE, timeout=60
        )
        assert answer.status_code == 400, (path, answer.text[:200])
        error = answer.json()["error"]
        assert error["code"] == "invalid_input" and LIMIT_NAMED in error["message"], error
    assert _head(url) == head


def test_what_http_accepts_at_the_limit_is_searchable_and_readable_at_every_seq(server):
    url = server.url
    httpx.put(url + "/v1/sessions/limit")
    body = _with('{"content": DEEP}', nested_text(CONTENT_DEPTH, "limitword"))
    added = _post(url, "/v1/sessions/limit/sections/findings/items", body.encode())
    assert added.status_code == 201, added.text[:300]
    seq = added.json()["record"]["seq"]
    found = httpx.get(url + "/v1/search", params={"q": "limitword"}, timeout=60)
    assert found.status_code == 200 and len(found.json()["hits"]) == 1, found.text[:300]
    for at in (seq, _head(url)):
        then = httpx.get(url + "/v1/state", params={"at": at}, timeout=60)
        assert then.status_code == 200, then.text[:300]
    items = httpx.get(url + "/v1/sessions/limit/sections/findings/items", timeout=60)
    assert items.status_code == 200
    assert items.json()["items"][0]["content"] == lists(CONTENT_DEPTH, "limitword")


@pytest.mark.parametrize("name", sorted(ENCODED_OTHERWISE))
def test_a_body_not_in_utf8_or_with_a_bom_is_a_400_naming_the_encoding(server, name):
    url = server.url
    httpx.put(url + "/v1/sessions/enc")
    head = _head(url)
    answer = _post(url, "/v1/sessions/enc/sections/findings/items", ENCODED_OTHERWISE[name])
    assert answer.status_code == 400, answer.text[:200]
    error = answer.json()["error"]
    assert error["code"] == "invalid_input", error
    assert "UTF-8" in error["message"] or "byte order mark" in error["message"], error
    assert _head(url) == head


@pytest.mark.parametrize(
    "frame, named",
    [
        (_with('{"after": -1, "filter": {"tenant": DEEP}}', nested_text(200)), LIMIT_NAMED),
        (_with('{"after": -1, "filter": DEEP}', nested_text(100_000)), LIMIT_NAMED),
        ('\ufeff{"after": -1}', "byte order mark"),
        ('{"after": -1, "after": 3}', "duplicate"),
    ],
)
def test_a_websocket_frame_goes_through_the_same_parser(server, frame, named):
    ws_url = "ws" + server.url.removeprefix("http") + "/v1/stream/ws"

    async def main():
        async with connect(ws_url, max_size=None) as ws:
            await ws.send(frame)
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 10)
            return closed.value.rcvd

    close = asyncio.run(main())
    assert close.code == 1008 and named in close.reason, close
