"""Connecting to a Redis store (refusing a server that could lose acknowledged writes), creating
it (`init-store`), and reading what it describes (the layout: keys.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..layout import DataDir
from ..partitions import check_partitions, partition_origin
from ..record import genesis
from ..shared import StoreInfo, adopt_store, one_line, redact_url
from . import StoreError, keys, require_redis, scripts

if TYPE_CHECKING:
    from . import Client

SCHEMES = ("redis", "rediss", "unix")
# The URL's own parameter for a server whose CONFIG command is disabled or renamed (managed
# services): the operator asserts appendonly yes / appendfsync always, which cannot be checked.
ASSUME_PARAM = "fsync"
ASSUME_VALUE = "always"


def is_redis_url(url: str) -> bool:
    return urlsplit(url).scheme in SCHEMES


def connect(url: str, timeout: float = 5.0) -> Client:
    """A client of the store's server (replies as bytes, no automatic retries: a write whose
    reply was lost is decided by reading the head, never sent twice blindly), refusing a server
    that could acknowledge a write and then lose it."""
    redis = require_redis()
    given, assumed = _split_url(url)
    try:
        client = redis.Redis.from_url(
            given,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0),
        )
        if not assumed:
            _check_durable(client, url)
        else:
            client.ping()
    except redis.RedisError as exc:
        raise StoreError(
            f"cannot connect to the store {redact_url(url)}: {one_line(exc)}"
        ) from None
    except ValueError as exc:  # from_url: a URL it cannot read
        raise StoreError(f"not a usable Redis URL {redact_url(url)}: {one_line(exc)}") from None
    return client


def _split_url(url: str) -> tuple[str, bool]:
    """The URL without our own parameter, and whether it asserts fsync=always."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise StoreError(f"not a Redis URL: {redact_url(url)} (redis://, rediss:// or unix://)")
    query = parse_qsl(parts.query, keep_blank_values=True)
    assumed = [value for name, value in query if name == ASSUME_PARAM]
    if assumed and assumed != [ASSUME_VALUE]:
        raise StoreError(f"{ASSUME_PARAM}= takes only {ASSUME_VALUE!r}, not {assumed!r}")
    rest = urlencode([(name, value) for name, value in query if name != ASSUME_PARAM])
    return urlunsplit(parts._replace(query=rest)), bool(assumed)


def _check_durable(client: Client, url: str) -> None:
    redis = require_redis()
    try:
        appendonly = config_value(client, "appendonly")
        appendfsync = config_value(client, "appendfsync")
    except redis.ResponseError as exc:
        client.close()
        raise StoreError(
            f"the Redis server {redact_url(url)} refuses CONFIG GET ({one_line(exc)}), so "
            "ledgermem cannot check that it fsyncs every write: allow CONFIG GET for this user "
            "(ACL +config|get) or, if you know the server runs appendonly yes with appendfsync "
            f"always, say so in the URL with ?{ASSUME_PARAM}={ASSUME_VALUE}"
        ) from None
    if appendonly != "yes" or appendfsync != "always":
        client.close()
        raise StoreError(
            f"the Redis server {redact_url(url)} runs appendonly {appendonly or '?'} with "
            f"appendfsync {appendfsync or '?'}: a write could be acknowledged and then lost; "
            "run it with appendonly yes and appendfsync always"
        )


def config_value(client: Client, name: str) -> str:
    found: Any = client.config_get(name)
    value = found.get(name.encode(), found.get(name)) if found else None
    return value.decode() if isinstance(value, bytes) else str(value or "")


def init_store(
    url: str,
    partitions: int,
    data_dir: str | Path,
    *,
    seg_bits: int = 16,
    origin: str | None = None,
) -> StoreInfo:
    """Record the origin and each partition's vkey and empty head (idempotent, atomic: one
    script). The key comes from `data_dir` (created there if it has none). Running it again on
    an existing store checks that P and the key match and changes nothing."""
    from ..store import load_or_create_key

    check_partitions(partitions)
    if not 2 <= seg_bits <= 40:
        raise StoreError(f"seg_bits is between 2 and 40, not {seg_bits}")
    client = connect(url)
    try:
        existing = _read_store(client)
        if existing is None:
            info = load_or_create_key(DataDir(data_dir), origin, create=True)
            key = info.key
            args: list[Any] = [key.origin, partitions, seg_bits]
            for n in range(partitions):
                part_origin = partition_origin(key.origin, n)
                args += [str(key.with_origin(part_origin).vkey), genesis(part_origin)]
            store_keys = [keys.STORE] + [keys.head(n) for n in range(partitions)]
            if client.eval(scripts.INIT, len(store_keys), *store_keys, *args) == 1:
                found = _read_store(client)
                assert found is not None
                return found
            existing = _read_store(client)  # another init-store won the race
            assert existing is not None
        return adopt_store(existing, partitions, data_dir)
    finally:
        client.close()


def read_store(client: Client) -> StoreInfo:
    """The store's description; StoreError when `init-store` never ran on this database."""
    info = _read_store(client)
    if info is None:
        raise StoreError(
            "the Redis database holds no ledgermem store: run ledgermem init-store first"
        )
    return info


def _read_store(client: Client) -> StoreInfo | None:
    fields = {k.decode(): v.decode() for k, v in client.hgetall(keys.STORE).items()}
    if not fields:
        return None
    partitions = int(fields["partitions"])
    vkeys = tuple(fields[f"vkey:{n}"] for n in range(partitions))
    return StoreInfo(fields["origin"], partitions, int(fields["seg_bits"]), vkeys)
