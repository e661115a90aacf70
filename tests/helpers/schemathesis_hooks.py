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
    list of one, so the request it sent is valid after all.
"""

from __future__ import annotations

import re
import tomllib
import uuid
from pathlib import Path

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
    """Keep a failure unless it is one of the two shapes above."""
    if failure.code != "ST201":
        return True
    components = [line for line in failure.message.splitlines() if "Invalid component" in line]
    return not components or not all(_meaningless(line, case) for line in components)


def _meaningless(component: str, case) -> bool:
    if component.strip() == _UNKNOWN_HEADER:
        return True
    fixed = _PATH.search(component)
    if fixed is not None:
        name = fixed.group(1)
        return str((case.path_parameters or {}).get(name)) in FIXED.get(name, ())
    found = _QUERY_TYPE.search(component)
    return found is not None and _is_array_query(case, found.group(1))


def _is_array_query(case, name: str) -> bool:
    for parameter in case.operation.definition.raw.get("parameters", ()):
        if parameter.get("in") == "query" and parameter.get("name") == name:
            schema = parameter.get("schema", {})
            branches = schema.get("anyOf", [schema])
            return any(branch.get("type") == "array" for branch in branches)
    return False
