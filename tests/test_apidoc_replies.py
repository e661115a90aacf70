"""streams/apidoc: how a reply's body is written into the document, by media type."""

from __future__ import annotations

from streams.apidoc import Reply, document, operation
from streams.apidoc.models import Open
from streams.web.routing import RawRoute


class Answer(Open):
    value: int


class OtherAnswer(Open):
    other: str


def _content(reply: Reply) -> tuple[dict | None, dict]:
    @operation("answer", "an answer", replies={200: reply})
    async def handler(request): ...

    doc = document([RawRoute("/answer", {"GET": handler})])
    return doc["paths"]["/answer"]["get"]["responses"]["200"].get("content"), doc


def test_a_reply_the_caller_may_ask_in_other_media_types_lists_each():
    content, doc = _content(
        Reply(Answer, also=(("text/plain", None), ("application/x-other", OtherAnswer)))
    )
    assert content == {
        "application/json": {"schema": {"$ref": "#/components/schemas/Answer"}},
        "text/plain": {"schema": {"type": "string"}},
        "application/x-other": {"schema": {"$ref": "#/components/schemas/OtherAnswer"}},
    }
    assert {"Answer", "OtherAnswer"} <= set(doc["components"]["schemas"])


def test_a_reply_without_a_body_type_is_text_or_nothing():
    assert _content(Reply(media_type="text/plain"))[0] == {
        "text/plain": {"schema": {"type": "string"}}
    }
    assert _content(Reply())[0] is None  # no JSON body: no content at all
