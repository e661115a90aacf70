"""/openapi.json as a document (streams/apidoc, docs/openapi.md): complete, well formed, valid.

- Every endpoint the app serves carries its operation, or the reason OpenAPI cannot say it
  (`undescribed`): nothing is served that the document forgets, and nothing is written by hand.
- The document is valid OpenAPI 3.1 to an independent validator (openapi-spec-validator), every
  operation has a unique operationId, every path parameter is declared, every reference resolves,
  and every success answer says what its body is.

Whether the server behaves as the document says is tests/test_openapi_conformance.py.
"""

from __future__ import annotations

import re

import httpx
import pytest
from openapi_spec_validator import validate

from streams.apidoc import hidden_reason, operation_of
from streams.server.settings import Settings
from streams.web.app import create_app
from tests.server import Server


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    with Server(tmp_path_factory.mktemp("openapi") / "data") as server:
        yield httpx.get(server.url + "/openapi.json", timeout=30).json()


def _operations(doc: dict):
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            yield path, method, op


def test_every_served_endpoint_is_described_or_says_why(tmp_path):
    app = create_app(Settings(data=str(tmp_path / "data")))
    seen = 0
    for route in app.routes:
        for method, endpoint in route.endpoints.items():
            reason = hidden_reason(endpoint)
            assert operation_of(endpoint) is not None or reason, (route.pattern, method)
            assert reason is None or len(reason) > 10, (route.pattern, reason)
            seen += 1
    assert seen > 60


def test_the_document_describes_exactly_the_described_endpoints(doc, tmp_path):
    app = create_app(Settings(data=str(tmp_path / "data")))
    described = {
        (route.pattern, method.lower())
        for route in app.routes
        for method, endpoint in route.endpoints.items()
        if operation_of(endpoint) is not None
    }
    assert {(path, method) for path, method, _ in _operations(doc)} == described


def test_the_document_is_valid_openapi_3_1(doc):
    assert doc["openapi"].startswith("3.1")
    validate(doc)  # raises with the first violation


def test_operation_ids_are_unique_and_every_path_parameter_is_declared(doc):
    ids = [op["operationId"] for _, _, op in _operations(doc)]
    assert len(ids) == len(set(ids))
    for path, method, op in _operations(doc):
        in_template = set(re.findall(r"{([^}]+)}", path))
        declared = {p["name"] for p in op.get("parameters", ()) if p["in"] == "path"}
        assert declared == in_template, (path, method)
        assert all(p["required"] for p in op.get("parameters", ()) if p["in"] == "path")


def test_every_reference_resolves_and_every_component_is_used(doc):
    text = str(doc)
    refs = set(re.findall(r"#/components/schemas/([A-Za-z0-9_.-]+)", text))
    components = set(doc["components"]["schemas"])
    assert refs <= components, refs - components
    assert components <= refs, components - refs


def test_every_success_says_its_body_and_every_write_its_refusals(doc):
    for path, method, op in _operations(doc):
        successes = {s: r for s, r in op["responses"].items() if s.startswith("2")}
        assert successes, (path, method)
        for status, reply in successes.items():
            if status != "204":
                assert reply.get("content"), (path, method, status)
        assert "4XX" in op["responses"], (path, method)
        if method in ("put", "patch", "delete"):
            assert "503" in op["responses"] and "507" in op["responses"], (path, method)


def test_every_cursor_route_declares_the_409_of_a_cursor_beyond_the_head(doc):
    """A cursor past the head is well formed and refused by the log's state: 409, declared on
    every operation that takes one, so a schema-valid request never meets an undeclared status
    (docs/wire.md; issue 30)."""

    def is_cursor(p: dict) -> bool:  # a seq, or -1 for the start (the timeline's `after` counts)
        return p["name"] == "after" and p["in"] == "query" and p["schema"].get("minimum") == -1

    cursor_routes = [
        op["operationId"]
        for _, _, op in _operations(doc)
        if any(map(is_cursor, op.get("parameters", ())))
    ]
    assert sorted(cursor_routes) == ["pollRecords", "streamJsonl", "streamSse"]
    for _, _, op in _operations(doc):
        if op["operationId"] in cursor_routes:
            assert "cursor_beyond_head" in op["responses"]["409"]["description"], op["operationId"]
