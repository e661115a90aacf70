"""Health, readiness, Prometheus metrics and the log's status (head, checkpoint, verifier).

Log-wide figures (the head, the checkpoint, append counts, fsyncs, every subscriber) are the
operator's: with API tokens they need the `log` scope (a tenant's `admin` does not imply it). A
tenant's token gets the same routes with its own figures only (`tenant_status`, `tenant_metrics`): its sessions, items, records
appended since the service started, its newest record's seq as `head` and its own subscribers.
Without tokens every caller is the operator, as before. docs/service.md has the table.

With a shared store every replica answers these for every partition (docs/scale-out-replicas.md):
the operator's `/v1/log/status` lists each partition (head from this replica's mirror, leader,
epoch, whether this replica leads it, its checkpoint and verifier); a tenant's shows its own
partition, with its figures where this replica leads it (null elsewhere: the projection lives
on the leader). `/v1/log/checkpoint?partition=N` is that partition's newest checkpoint.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from starlette.requests import Request
from starlette.responses import Response

from eventstore import layout
from eventstore.checkpoint import CheckpointError, parse_checkpoint
from eventstore.jcs import MAX_SAFE_INTEGER
from streams.apidoc import Reply, operation
from streams.apidoc.models import ErrorReply
from streams.routes.query import parse_query
from streams.routes.status_models import (
    CHECKPOINT_NOTE,
    PartitionQuery,
    ServiceHealth,
    ServiceReady,
    Status,
)
from streams.server.metrics import CHANNELS
from streams.server.service import NotLeaderHere, Service
from streams.server.settings import LOG_SCOPE
from streams.web.auth import Principal

if TYPE_CHECKING:
    from eventstore.shared import StoreInfo
    from eventstore.store import KeyInfo
    from streams.cluster.cluster import Cluster
from streams.web.errors import ApiError, error_response, refusal_code
from streams.web.responses import json_response
from streams.web.routing import RawRoute, routes_of

LOG = LOG_SCOPE  # the scope that sees log-wide figures (never implied by a tenant's admin)
STATUS = ("status",)  # the document's tag
NOT_READY = Reply(
    ErrorReply,
    "not ready: starting or shutting down (not_ready), writes refused until the log reopens, "
    "a shared store out of reach (store_unreachable), or the background verifier found a "
    "record or checkpoint that does not check (verifier_failed)",
)


def routes(service: Service) -> list[RawRoute]:
    @operation(
        "checkHealth", "alive: the process answers", replies={200: ServiceHealth}, tags=STATUS
    )
    async def healthz(request: Request) -> Response:
        return json_response({"status": "ok"})

    @operation(
        "checkReady",
        "ready to serve: the log open and taking writes (503 while starting or stopping)",
        replies={200: ServiceReady, 503: NOT_READY},
        tags=STATUS,
    )
    async def readyz(request: Request) -> Response:
        if not service.ready:
            return error_response(503, "not_ready", "the service is starting or shutting down")
        refusal = service.refusal
        if refusal is not None:
            code, _ = refusal_code(refusal)
            return error_response(503, code, f"writes are refused until the log reopens: {refusal}")
        failed = service.verification_failure()
        if failed is not None:
            return error_response(
                503,
                "verifier_failed",
                f"the background verifier failed: {failed}; run `ledgermem verify` on the log "
                "(docs/verify.md)",
            )
        if service.cluster is not None:
            unreachable = service.cluster.store_unreachable()
            if unreachable is not None:
                return error_response(
                    503,
                    "store_unreachable",
                    f"the store has not answered for {unreachable:.1f} s; this replica leads "
                    "no partition until it does",
                )
            partitions = [
                {key: entry[key] for key in ("partition", "head", "leader", "leading")}
                for entry in service.cluster.status()
            ]
            return json_response({"status": "ready", "partitions": partitions})
        return json_response({"status": "ready", "head": service.writer.size - 1})

    @operation(
        "getMetrics",
        "Prometheus metrics: log-wide with the log scope, else the token's tenant's own",
        replies={200: Reply(description="the exposition format 0.0.4", media_type="text/plain")},
        tags=STATUS,
    )
    async def metrics(request: Request) -> Response:
        principal = service.principal(request, "read")
        if LOG in principal.scopes:
            text = service.metrics.exposition()
        else:
            text = tenant_metrics(service, principal.tenant)
        return Response(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    @operation(
        "getLogStatus",
        "the log's status: head, newest checkpoint, subscribers, verifier (a tenant's own figures "
        "without the log scope; every partition on a replica of a shared store)",
        replies={200: Status},
        tags=STATUS,
    )
    async def log_status(request: Request) -> Response:
        principal = service.principal(request, "read")
        if LOG in principal.scopes:
            return json_response(log_status_of(service))
        return json_response(tenant_status(service, principal.tenant))

    @operation(
        "getCheckpoint",
        "the newest signed checkpoint (a C2SP signed note), as text; 404 before the first",
        query=PartitionQuery,
        replies={
            200: CHECKPOINT_NOTE,
            404: Reply(ErrorReply, "not_found: no checkpoint has been written yet"),
        },
        tags=("proofs",),
    )
    async def checkpoint(request: Request) -> Response:
        """The newest signed checkpoint file, as is: mirrors (`ledgermem tail`) anchor with it."""
        principal = service.principal(request, "read")
        asked = parse_query(PartitionQuery, request.query_params.multi_items()).partition
        partition = status_partition(service, principal, asked)
        if service.cluster is None:
            log_dir = service.writer.log_dir
            assert log_dir is not None  # a service without a store writes a log directory
        else:
            log_dir = service.cluster.mirror(partition).log_dir
        try:
            text = (log_dir / layout.CHECKPOINT).read_bytes()
        except FileNotFoundError:
            return error_response(404, "not_found", "no checkpoint has been written yet")
        return Response(
            text, media_type="text/plain; charset=utf-8", headers={"Cache-Control": "no-cache"}
        )

    table = [
        ("/v1/log/checkpoint", checkpoint),
        ("/healthz", healthz),
        ("/readyz", readyz),
        ("/metrics", metrics),
        ("/v1/log/status", log_status),
    ]
    return routes_of((path, {"GET": handler}) for path, handler in table)


def parse_count(value: str) -> int | None:
    """A query parameter's record count or seq (0 to 2**53-1, as JSON numbers hold exactly), or
    None when it is not one. Long strings are refused before `int` meets them (Python refuses
    to convert more than 4300 digits)."""
    if not (value.isascii() and value.isdigit() and len(value.lstrip("0")) <= 16):
        return None
    number = int(value)
    return number if number <= MAX_SAFE_INTEGER else None


def status_partition(service: Service, principal: Principal, number: int | None) -> int:
    """`?partition=N` (`number`, parsed: PartitionQuery) for the operator (0 by default); a
    tenant's token reads its own.

    Checked without a shared store too (its one partition is 0), so a client's mistake shows
    there as it would against a store: not a number is 400 (the query's model), a partition
    beyond the last 404 (as under /v1/log/partitions/)."""
    partitions = service.partitions
    if number is not None and number >= partitions:
        raise ApiError(
            404, "not_found", f"no partition {number}: partitions are 0..{partitions - 1}"
        )
    cluster = service.cluster
    if cluster is not None and LOG not in principal.scopes:
        return cluster.partition_of(principal.tenant)
    return number or 0


def checkpoint_figures(path, vkey) -> dict:
    try:
        stat = path.stat()
        parsed = parse_checkpoint(path.read_text("utf-8"), vkey)
        return {"size": parsed.size, "age_seconds": round(time.time() - stat.st_mtime, 3)}
    except (OSError, CheckpointError) as exc:
        return {"size": None, "age_seconds": None, "error": str(exc)}


def _store(service: Service) -> tuple[Cluster, StoreInfo, KeyInfo]:
    """A replica's cluster, the store's info and this replica's key (both read at its start,
    before any request is served)."""
    cluster: Cluster | None = service.cluster
    assert cluster is not None, "a store's figures need the store"
    info: StoreInfo | None = cluster.info
    key: KeyInfo | None = cluster.key
    assert info is not None and key is not None, "the cluster has started"
    return cluster, info, key


def store_status(service: Service) -> dict:
    """The operator's `/v1/log/status` on a replica of a shared store: every partition."""
    cluster, info, key = _store(service)
    partitions = []
    for entry in cluster.status():
        partition = entry["partition"]
        vkey = info.key_for(key.key, partition).vkey
        mirror = cluster.mirror(partition)
        verifier = cluster.verifier(partition)
        partitions.append(
            {
                **entry,
                "origin": mirror.origin,
                "vkey": str(vkey),
                "checkpoint": checkpoint_figures(mirror.log_dir / layout.CHECKPOINT, vkey),
                "verifier": verifier.verdict.to_json() if verifier is not None else None,
            }
        )
    return {
        "scope": "store",
        "origin": info.origin,
        "replica": cluster.replica_id,
        "partitions": partitions,
        "subscribers": service.metrics.subscriber_counts(),
        "stream_traces_skipped": service.metrics.traces_skipped,
    }


def log_status_of(service: Service) -> dict:
    if service.cluster is not None:
        return store_status(service)
    writer = service.writer
    assert writer.log_dir is not None  # a service without a store writes a log directory
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

    principal = Principal(tenant, frozenset())
    try:
        counts: tuple[int, int, int] | None = service.memory_for(principal).read(own)
    except NotLeaderHere:  # the projection lives on the partition's leader
        counts = None
    sessions, items, head = counts if counts is not None else (None, None, None)
    hub = service.hub_for(principal)
    subscribers = dict.fromkeys(CHANNELS, 0)
    for subscription in hub.subscriptions if hub is not None else ():
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
    hidden = "a log-wide figure: it needs the log scope"
    where: dict[str, int]
    if service.cluster is None:
        verifier, origin, vkey, where = (
            service.verifier,
            service.writer.origin,
            service.writer.key.vkey,
            {},
        )
    else:
        cluster, info, key = _store(service)
        partition = cluster.partition_of(tenant)
        verifier = cluster.verifier(partition)
        origin = cluster.mirror(partition).origin
        vkey = info.key_for(key.key, partition).vkey
        where = {"partition": partition}
    verdict = verifier.verdict if verifier else None
    return {
        "scope": "tenant",
        "tenant": tenant,
        **where,
        "origin": origin,
        "vkey": str(vkey),
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
        if figures[name] is not None:  # None: another replica leads the tenant's partition
            gauge.labels(tenant).set(figures[name])
    gauge = Gauge(
        "ledgermem_tenant_subscribers", "This tenant's open subscribers", ["tenant", "channel"],
        registry=registry,
    )  # fmt: skip
    for channel, n in figures["subscribers"].items():
        gauge.labels(tenant, channel).set(n)
    return generate_latest(registry)
