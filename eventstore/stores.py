"""Which shared store a URL names: `open_engine(url)` gives the engine (eventstore/shared/
engine.py's `StoreEngine`) of eventstore/pg/ for postgresql:// and of eventstore/redis/ for
redis://, rediss:// and unix://; any other URL is a StoreError naming both. Nothing connects
until the engine is used."""

from __future__ import annotations

from urllib.parse import urlsplit

from .shared.engine import POSTGRESQL_SCHEMES, StoreEngine, check_store_url


def open_engine(url: str) -> StoreEngine:
    check_store_url(url)
    if urlsplit(url).scheme in POSTGRESQL_SCHEMES:
        from .pg.engine import PgEngine

        return PgEngine(url)
    from .redis.engine import RedisEngine

    return RedisEngine(url)
