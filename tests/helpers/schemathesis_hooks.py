"""schemathesis hooks for tests/test_openapi_conformance.py (loaded by its config file).

- Idempotency-Key: schemathesis draws header values from a small space and reuses them, and a key
  seen before makes the service answer the first call's record without judging the new body
  (docs/wire.md). That is the documented contract, but it would hide the body each case is about,
  so every case gets a key of its own.
- Three kinds of "schema-violating request accepted" that say nothing about the API are dropped,
  each by its exact shape, so every other such failure still fails the run:
  - a path parameter the config fixes (the ids of real data): schemathesis may mean to send an
    invalid one, but sends the fixed, valid value, which the server rightly takes;
  - an unknown *header* (HTTP lets any hop add headers; no server can refuse them), which
    schemathesis sends as if a header set were closed;
  - an "incorrect type" for a repeatable query parameter: a single value on the wire is also a
    list of one, so the request it sent is valid after all; and a "violation" of an optional
    query parameter the request did not carry.
"""

from __future__ import annotations

import re
import tomllib
import uuid
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import schemathesis

_UNKNOWN_HEADER = "Invalid component: in header - object with unexpected properties"
_QUERY_TYPE = re.compile(r"Invalid component: parameter `([^`]+)` in query - \1: Incorrect type")
_PATH = re.compile(r"Invalid component: parameter `([^`]+)` in path")
CONFIG = "schemathesis.toml"  # the test runs schemathesis beside its config file


def _fixed_path_values() -> dict[str, set[str]]:
    """name -> every value the config fixes that path parameter to, in any operation."""
    path = Path(CONFIG)
    config = tomllib.loads(path.read_text()) if path.exists() else {}
    tables = [config.get("parameters", {})]
    tables += [operation.get("parameters", {}) for operation in config.get("operations", [])]
    fixed: dict[str, set[str]] = {}
    for table in tables:
        for key, value in table.items():
            if key.startswith("path."):
                fixed.setdefault(key.removeprefix("path."), set()).add(str(value))
    return fixed


FIXED = _fixed_path_values()


@schemathesis.hook
def before_call(ctx, case, kwargs):
    if case.headers and "Idempotency-Key" in case.headers:
        case.headers["Idempotency-Key"] = uuid.uuid4().hex


@schemathesis.hook
def filter_failure(ctx, failure, case, response):
    """Keep a failure unless every invalid part it names is one of the shapes above."""
    if failure.code != "ST201":
        return True
    components = _components(failure.message)
    sent = set(parse_qs(urlsplit(response.request.url).query, keep_blank_values=True))
    return not components or not all(
        _meaningless(head, details, case, sent) for head, details in components
    )


def _components(message: str) -> list[tuple[str, list[str]]]:
    """Each "Invalid component" line of a failure, with the "- violates ..." lines under it."""
    found: list[tuple[str, list[str]]] = []
    for line in message.splitlines():
        text = line.strip()
        if text.startswith("Invalid component"):
            found.append((text, []))
        elif found and text.startswith("- violates"):
            found[-1][1].append(text)
    return found


def _meaningless(head: str, details: list[str], case, sent: set[str]) -> bool:
    if head == _UNKNOWN_HEADER:
        return True
    fixed = _PATH.search(head)
    if fixed is not None:
        name = fixed.group(1)
        return str((case.path_parameters or {}).get(name)) in FIXED.get(name, ())
    single = _QUERY_TYPE.search(head)
    if single is not None:
        return _query_parameter(case, single.group(1)).get("array", False)
    if " in query" not in head or not details:
        return False
    return all(_query_detail_meaningless(detail, case, sent) for detail in details)


_DETAIL = re.compile(r"violates `[^`]+` at /properties/([^/\s]+)(.*)")


def _query_detail_meaningless(detail: str, case, sent: set[str]) -> bool:
    """A query value that is valid as sent: one value of a repeatable parameter (a list of one
    on the wire), or an optional parameter the request's URL does not carry at all."""
    found = _DETAIL.search(detail)
    if found is None:
        return False
    name, rest = found.groups()
    parameter = _query_parameter(case, name)
    if not parameter:
        return False
    if parameter["array"] and "(was array, became string)" in rest:
        return True
    return name not in sent and not parameter["required"]


def _query_parameter(case, name: str) -> dict:
    """{"array": is it repeatable, "required": ...} of a declared query parameter, else {}."""
    for parameter in case.operation.definition.raw.get("parameters", ()):
        if parameter.get("in") == "query" and parameter.get("name") == name:
            schema = parameter.get("schema", {})
            branches = schema.get("anyOf", [schema])
            array = any(branch.get("type") == "array" for branch in branches)
            return {"array": array, "required": parameter.get("required", False)}
    return {}
