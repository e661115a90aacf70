"""What a stream's request says, checked: its query (SSE, JSONL, long-poll) or a WebSocket's
first frame, into a cursor, a filter and a partition (docs/wire.md). Pure functions over the
request's values; a malformed one is an `ApiError` naming the problem (400, or 403/404)."""

from __future__ import annotations

import math
import re
from urllib.parse import parse_qsl

from starlette.types import Scope

from eventstore.errors import InvalidPayload
from eventstore.filters import RecordFilter
from eventstore.identifiers import is_identifier
from eventstore.jcs import MAX_SAFE_INTEGER, loads_strict
from streams.server.service import Service
from streams.web.auth import Principal
from streams.web.errors import ApiError

FILTER_KEYS = ("tenant", "session", "section", "type")
_INTEGER = re.compile(r"-?[0-9]{1,19}")


def bad(message: str) -> ApiError:
    return ApiError(400, "invalid_input", message)


def query_params(
    scope: Scope, allowed: tuple[str, ...], filters: bool = True
) -> dict[str, list[str]]:
    """The query string as name -> values; a name outside `allowed`, the filters (when taken)
    and `token` is a 400."""
    params: dict[str, list[str]] = {}
    raw = scope.get("query_string", b"").decode("latin-1")
    try:
        pairs = parse_qsl(raw, keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        raise bad("the query string is not UTF-8") from None
    for name, value in pairs:
        if name not in allowed and (not filters or name not in FILTER_KEYS) and name != "token":
            known = ", ".join((*allowed, *(FILTER_KEYS if filters else ()), "token"))
            raise bad(f"unknown query parameter {name!r}: this stream takes {known}")
        params.setdefault(name, []).append(value)
    return params


def single(params: dict[str, list[str]], name: str) -> str | None:
    values = params.get(name)
    if not values:
        return None
    if len(values) > 1:
        raise bad(f"query parameter {name} is given {len(values)} times; give it once")
    return values[0]


def parse_cursor(value: object, name: str = "after") -> int:
    """A cursor: the seq of the last record seen, or -1 for the start of the log."""
    if type(value) is int:
        cursor = value
    elif isinstance(value, str) and _INTEGER.fullmatch(value):
        cursor = int(value)
    else:
        raise bad(f"{name} must be a seq (an integer >= -1), not {value!r}")
    if cursor < -1:
        raise bad(f"{name} must be a seq (an integer >= -1), not {cursor}; -1 is the start")
    if cursor > MAX_SAFE_INTEGER:  # no seq is larger (docs/format.md): a typo, not a position
        raise bad(f"{name} must be a seq (at most 2**53-1), not {cursor}")
    return cursor


def after_of(params: dict[str, list[str]]) -> int:
    """The query's cursor: -1 (the start) when not given; given empty, it is no seq (400)."""
    value = single(params, "after")
    return -1 if value is None else parse_cursor(value)


def flag(params: dict[str, list[str]], name: str, default: bool) -> bool:
    value = single(params, name)
    if value is None:
        return default
    if value in ("1", "true"):
        return True
    if value in ("0", "false"):
        return False
    raise bad(f"{name} must be 0 or 1, not {value!r}")


def number(
    params: dict[str, list[str]], name: str, default: float, low: float, high: float
) -> float:
    value = single(params, name)
    if value is None:
        return min(default, high)  # a default is capped like any value
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not low <= number:  # also refuses NaN
        raise bad(f"{name} must be a number >= {low:g}, not {value!r}")
    return min(number, high)


def filter_values(name: str, values: object) -> list[str]:
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, list) or not values:
        raise bad(f"filter {name} must be a string or a non-empty list of strings")
    for value in values:
        if not is_identifier(value):
            raise bad(
                f"filter {name} value {value!r} is not an identifier: use 1 to 128 characters "
                "of A-Z a-z 0-9 . _ : @ / + -"
            )
    return values


def scoped_filter(
    fields: dict[str, list[str]], principal: Principal, tenants: bool
) -> RecordFilter:
    """The subscriber's filter, with its tenant forced when credentials are configured.

    With tokens a principal sees its own tenant only, and so never the control records (`_log`);
    without tokens (one tenant) every record is visible, as docs/wire.md says.
    """
    if tenants:
        asked = fields.get("tenant")
        if asked is not None and principal.tenant not in asked:
            raise ApiError(403, "forbidden", f"this token reads tenant {principal.tenant!r} only")
        fields = {**fields, "tenant": [principal.tenant]}
    return RecordFilter.of(**fields)


def query_filter(params: dict[str, list[str]]) -> dict[str, list[str]]:
    return {name: filter_values(name, params[name]) for name in FILTER_KEYS if name in params}


def client_address(scope: Scope) -> str:
    client = scope.get("client")
    return client[0] if client else "unknown"


def parse_partition(value: object, partitions: int) -> int | None:
    """A stream's `partition=N` (0 <= N < P), or None when not given. A number beyond the
    partitions is 404, as under /v1/log/partitions/: no such partition (yet) exists."""
    if value is None:
        return None
    if type(value) is int or (isinstance(value, str) and _INTEGER.fullmatch(value)):
        number = int(value)
        if 0 <= number < partitions:
            return number
        if number >= partitions:
            raise ApiError(
                404, "not_found", f"no partition {number}: partitions are 0..{partitions - 1}"
            )
    raise bad(f"partition must be one of 0..{partitions - 1}, not {value!r}")


def stream_partition(
    given: int | None, where: RecordFilter, principal: Principal, scoped: bool, service: Service
) -> int:
    """Which partition a stream reads (docs/wire.md, "Partitions"): the tenant's when the token or
    the filter names one; else the one given; with P = 1, partition 0."""
    partitions = service.partitions
    if partitions == 1:
        return 0 if given is None else given
    cluster = service.cluster
    assert cluster is not None, "several partitions are a shared store's"
    tenants = sorted(where.tenant) if where.tenant is not None else None
    if scoped:
        tenants = [principal.tenant]
    if tenants:
        found = {cluster.partition_of(tenant) for tenant in tenants}
        if len(found) > 1:
            raise bad(
                f"the tenants {', '.join(tenants)} live in partitions "
                f"{', '.join(map(str, sorted(found)))}: a stream reads one partition"
            )
        (partition,) = found
        if given is not None and given != partition:
            raise bad(f"the tenants of this stream live in partition {partition}, not {given}")
        return partition
    if given is None:
        raise bad(
            f"this store has {partitions} partitions (0..{partitions - 1}): name the one to "
            "read with partition=N, or filter on a tenant"
        )
    return given


def parse_subscribe_frame(text: str | None) -> tuple[int, dict[str, list[str]], object]:
    """The WebSocket's first frame: `{"after": N, "filter": {...}, "partition": N}`, all
    optional: (after, filter fields, the partition as given or None, unchecked)."""
    if text is None:
        raise bad('the first frame must be a text frame {"after": N, "filter": {...}}')
    try:
        frame = loads_strict(text)
    except InvalidPayload as exc:
        raise bad(f"first frame: {exc}") from None
    if type(frame) is not dict:
        raise bad('the first frame must be a JSON object {"after": N, "filter": {...}}')
    unknown = set(frame) - {"after", "filter", "partition"}
    if unknown:
        raise bad(
            f"unknown key {sorted(unknown)[0]!r} in the first frame: use after, filter, partition"
        )
    after = frame.get("after", -1)
    if type(after) is not int:
        raise bad(f"after must be a seq (an integer >= -1), not {after!r}")
    after = parse_cursor(after)
    given = frame.get("filter", {})
    if type(given) is not dict:
        raise bad("filter must be an object of tenant, session, section, type")
    unknown = set(given) - set(FILTER_KEYS)
    if unknown:
        name = sorted(unknown)[0]
        raise bad(f"unknown filter {name!r}: filter on tenant, session, section, type")
    fields = {name: filter_values(name, values) for name, values in given.items()}
    return after, fields, frame.get("partition")
