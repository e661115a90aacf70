"""Health, readiness, Prometheus metrics and the log's status (head, checkpoint, verifier).

Log-wide figures (the head, the checkpoint, append counts, fsyncs, every subscriber) are the
operator's: with API tokens they need the `admin` scope. A tenant's token gets the same routes
with its own figures only (`tenant_status`, `tenant_metrics`): its sessions, items, records
appended since the service started, its newest record's seq as `head` and its own subscribers.
Without tokens every caller is the operator, as before. docs/service.md has the table.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import request_response

from eventstore import layout
from eventstore.checkpoint import CheckpointError, parse_checkpoint

from .errors import error_response, refusal_code
from .metrics import CHANNELS
from .responses import json_response
from .routing import RawRoute
from .service import Service

ADMIN = "admin"  # the scope that sees log-wide figures


def routes(service: Service) -> list[RawRoute]:
    async def healthz(request: Request) -> Response:
        return json_response({"status": "ok"})

    async def readyz(request: Request) -> Response:
        if not service.ready:
            return error_response(503, "not_ready", "the service is starting or shutting down")
        refusal = service.refusal
        if refusal is not None:
            code, _ = refusal_code(refusal)
            return error_response(503, code, f"writes are refused until the log reopens: {refusal}")
        return json_response({"status": "ready", "head": service.writer.size - 1})

    async def metrics(request: Request) -> Response:
        principal = service.principal(request, "read")
        if ADMIN in principal.scopes:
            text = service.metrics.exposition()
        else:
            text = tenant_metrics(service, principal.tenant)
        return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    async def log_status(request: Request) -> Response:
        principal = service.principal(request, "read")
        if ADMIN in principal.scopes:
            return json_response(log_status_of(service))
        return json_response(tenant_status(service, principal.tenant))

    async def checkpoint(request: Request) -> Response:
        """The newest signed checkpoint file, as is: mirrors (`ledgermem tail`) anchor with it."""
        service.principal(request, "read")
        try:
            text = (service.writer.log_dir / layout.CHECKPOINT).read_bytes()
        except FileNotFoundError:
            return error_response(404, "not_found", "no checkpoint has been written yet")
        return Response(text, media_type="text/plain; charset=utf-8")

    table = [
        ("/v1/log/checkpoint", checkpoint),
        ("/healthz", healthz),
        ("/readyz", readyz),
        ("/metrics", metrics),
        ("/v1/log/status", log_status),
    ]
    return [RawRoute(path, {"GET": request_response(handler)}) for path, handler in table]


def log_status_of(service: Service) -> dict:
    writer = service.writer
    path = writer.log_dir / layout.CHECKPOINT
    checkpoint: dict | None = None
    try:
        stat = path.stat()
        parsed = parse_checkpoint(path.read_text("utf-8"), writer.key.vkey)
        checkpoint = {"size": parsed.size, "age_seconds": round(time.time() - stat.st_mtime, 3)}
    except (OSError, CheckpointError) as exc:
        checkpoint = {"size": None, "age_seconds": None, "error": str(exc)}
    verdict = service.verifier.verdict.to_json() if service.verifier else None
    return {
        "scope": "log",
        "origin": writer.origin,
        "vkey": str(writer.key.vkey),
        "head": writer.size - 1,
        "checkpoint": checkpoint,
        "subscribers": service.metrics.subscriber_counts(),
        "verifier": verdict,
        "fsync": service.metrics.fsync_summary(),
    }


def tenant_figures(service: Service, tenant: str) -> dict:
    """What a tenant may see of the running service: its own figures, nothing log-wide."""

    def own(state) -> tuple[int, int, int]:
        sessions = [s for (t, _), s in state.sessions.items() if t == tenant]
        items = sum(len(section.items) for s in sessions for section in s.sections.values())
        return len(sessions), items, max((s.last_seq for s in sessions), default=-1)

    sessions, items, head = service.memory.read(own)
    subscribers = dict.fromkeys(CHANNELS, 0)
    for subscription in service.hub.subscriptions if service.hub is not None else ():
        if not subscription.closed and subscription.cursor.filter.tenant == frozenset((tenant,)):
            subscribers[subscription.channel] = subscribers.get(subscription.channel, 0) + 1
    return {
        "sessions": sessions,
        "items": items,
        "appends": service.metrics.tenant_appends.get(tenant, 0),
        "head": head,
        "subscribers": subscribers,
    }


def tenant_status(service: Service, tenant: str) -> dict:
    """`/v1/log/status` for a tenant's token: the keys of the operator's answer (so one client
    reads both), with the tenant's own figures and null where only a log-wide figure exists."""
    figures = tenant_figures(service, tenant)
    verdict = service.verifier.verdict if service.verifier else None
    hidden = "a log-wide figure: it needs the admin scope"
    return {
        "scope": "tenant",
        "tenant": tenant,
        "origin": service.writer.origin,
        "vkey": str(service.writer.key.vkey),
        **figures,
        "checkpoint": {"size": None, "age_seconds": None, "error": hidden},
        "verifier": None
        if verdict is None
        else {"state": verdict.state, "verified_through": None, "checkpoint_verified": None,
              "error": verdict.error},
        "fsync": {"count": None, "mean_ms": None},
    }  # fmt: skip


def tenant_metrics(service: Service, tenant: str) -> bytes:
    """`/metrics` for a tenant's token: its own figures in the exposition format."""
    figures = tenant_figures(service, tenant)
    registry = CollectorRegistry()
    for name, help_ in (
        ("sessions", "Sessions of this tenant"),
        ("items", "Items in this tenant's sections"),
        ("appends", "Records of this tenant made durable since the service started"),
    ):
        gauge = Gauge(f"ledgermem_tenant_{name}", help_, ["tenant"], registry=registry)
        gauge.labels(tenant).set(figures[name])
    gauge = Gauge(
        "ledgermem_tenant_subscribers", "This tenant's open subscribers", ["tenant", "channel"],
        registry=registry,
    )  # fmt: skip
    for channel, n in figures["subscribers"].items():
        gauge.labels(tenant, channel).set(n)
    return generate_latest(registry)
