"""A JSON value as an item's content, given back exactly (sections/adapters/openai_agents.py,
sections/adapters/adk.py).

A value the log's canonical JSON keeps exactly (strings, booleans, null, lists, objects,
integers within ±(2**53-1), non-integral finite floats) is the content as it is, so search,
context and the REST API see it plainly. A value canonical JSON would change (1.0 becomes 1,
-0.0 becomes 0, a larger integer is refused) is kept as its JSON text, with `JSON_TEXT` true in
the item's metadata, and parsed back. Object keys come back in canonical (sorted) order: JSON
gives their order no meaning.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from eventstore.errors import InvalidInput
from eventstore.jcs import MAX_SAFE_INTEGER

JSON_TEXT = "json_text"  # item metadata: the content is the value's JSON text


def exact(value: object) -> bool:
    """Whether the log's canonical JSON keeps this JSON value exactly, types included."""
    if value is None or isinstance(value, (bool, str)):
        return True
    if isinstance(value, int):
        return abs(value) <= MAX_SAFE_INTEGER
    if isinstance(value, float):
        return math.isfinite(value) and not value.is_integer()
    if isinstance(value, list):
        return all(exact(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and exact(v) for k, v in value.items())
    return False


def stored(value: object) -> tuple[Any, dict[str, Any]]:
    """The content and the metadata a JSON value is kept as; InvalidInput for what is not JSON."""
    if exact(value):
        return value, {}
    try:
        return json.dumps(value), {JSON_TEXT: True}
    except (TypeError, ValueError) as e:
        raise InvalidInput(f"not a JSON value: {e}") from None


def value_of(content: object, metadata: Mapping[str, Any]) -> Any:
    """The JSON value an item's content and metadata give back (`stored` undone)."""
    if metadata.get(JSON_TEXT) is True and isinstance(content, str):
        return json.loads(content)
    return content
