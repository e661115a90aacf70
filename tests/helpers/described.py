"""Checking a real answer against the schema /openapi.json gives for it (jsonschema, 2020-12)."""

from __future__ import annotations

import jsonschema


def reply_schema(doc: dict, path: str, method: str, status: int | str) -> dict:
    """The JSON schema of one answer of one operation."""
    response = doc["paths"][path][method]["responses"][str(status)]
    return response["content"]["application/json"]["schema"]


def conforms(doc: dict, schema: dict, value: object) -> None:
    """Raise unless `value` is valid against `schema`, its $refs read in the document's
    components."""
    jsonschema.Draft202012Validator({**schema, "components": doc["components"]}).validate(value)


def ids(doc: dict, *routes: tuple[str, str]) -> list[str]:
    return [doc["paths"][path][method]["operationId"] for path, method in routes]
