"""schemathesis hooks for tests/test_openapi_conformance.py (loaded by its config file).

Idempotency-Key: schemathesis draws header values from a small space and reuses them, and a key
seen before makes the service answer the first call's record without judging the new body
(docs/wire.md). That is the documented contract, but it would hide the body each case is about,
so every case gets a key of its own.
"""

from __future__ import annotations

import uuid

import schemathesis


@schemathesis.hook
def before_call(ctx, case, kwargs):
    if case.headers and "Idempotency-Key" in case.headers:
        case.headers["Idempotency-Key"] = uuid.uuid4().hex
