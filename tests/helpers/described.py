"""Checking a real answer against the schema /openapi.json gives for it (jsonschema, 2020-12)."""

from __future__ import annotations

import jsonschema


def reply_schema(doc: dict, path: str, method: str, status: int | str) -> dict:
    """The JSON schema of one answer of one operation."""
    response = doc["paths"][path][method]["responses"][str(status)]
    return response["content"]["application/json"]["schema"]


def validator(doc: dict, schema: dict) -> jsonschema.Draft202012Validator:
    """A validator of `schema`, its $refs read in the document's components."""
    return jsonschema.Draft202012Validator({**schema, "components": doc["components"]})


def conforms(doc: dict, schema: dict, value: object) -> None:
    """Raise unless `value` is valid against `schema`, its $refs read in the document's
    components."""
    validator(doc, schema).validate(value)


def ids(doc: dict, *routes: tuple[str, str]) -> list[str]:
    return [doc["paths"][path][method]["operationId"] for path, method in routes]
