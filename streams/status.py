"""Health, readiness, Prometheus metrics and the log's status (head, checkpoint, verifier)."""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import request_response

from eventstore import layout
from eventstore.checkpoint import CheckpointError, parse_checkpoint

from .errors import error_response, refusal_code
from .responses import json_response
from .routing import RawRoute
from .service import Service


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
        service.principal(request, "read")
        return Response(
            service.metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8"
        )

    async def log_status(request: Request) -> Response:
        service.principal(request, "read")
        return json_response(log_status_of(service))

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
        "origin": writer.origin,
        "vkey": str(writer.key.vkey),
        "head": writer.size - 1,
        "checkpoint": checkpoint,
        "subscribers": service.metrics.subscriber_counts(),
        "verifier": verdict,
        "fsync": service.metrics.fsync_summary(),
    }
