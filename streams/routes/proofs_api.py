"""Proofs for monitors and witnesses: the log as C2SP tlog-tiles, and RFC 9162 proofs on demand.

    GET /v1/log/checkpoint                       the newest signed checkpoint (streams/routes/status.py)
    GET /v1/log/tile/<L>/<N>[.p/<W>]             Merkle tiles (c2sp.org/tlog-tiles)
    GET /v1/log/tile/entries/<N>[.p/<W>]         entry bundles: the records' leaf preimages
    GET /v1/log/proof/inclusion?seq=N[&size=M]   JSON, or the tlog-proof text with ?format=text
    GET /v1/log/proof/consistency?old=A[&new=B]  JSON

`https://HOST/v1/log` is the tlog-tiles prefix a standard client is given (the checkpoint's origin
is the log's own name, not this URL). In store mode every partition is a log of its own, under
`/v1/log/partitions/<P>/`; `/v1/log/...` is the caller's tenant's partition (an operator's:
`?partition=`, 0 by default), as for `/v1/log/checkpoint`.

Tiles and proofs are hashes; they are served against the newest signed checkpoint, so every
answer leads to a root a client can check with the log's vkey alone. Entry bundles hold every
tenant's identifiers (docs/format.md: opaque ids, never personal data, but still the whole log's
shape), so with API tokens they need the `log` scope (never implied by a tenant's `admin`);
tiles and proofs need `read`.
docs/proofs.md has the routes, the caching rules and a client's walk.
"""

from __future__ import annotations

import asyncio
import base64

import orjson
from starlette.requests import Request
from starlette.responses import Response

from eventstore import layout
from eventstore.checkpoint import Checkpoint, CheckpointError, parse_checkpoint
from eventstore.errors import InvalidInput
from eventstore.log_proofs import SubtreeRoots, checkpoint_of_size, header_key
from eventstore.merkle import consistency_proof, inclusion_proof
from eventstore.reader import LogReader
from eventstore.segfile import leaf_hash_of
from eventstore.tile_source import TileNotFound, TileSource
from eventstore.tiles import BadTilePath, parse_tile_path
from eventstore.tlog_proof import format_tlog_proof
from streams.apidoc import Reply, operation, undescribed
from streams.apidoc.models import ErrorReply
from streams.routes.proofs_models import (
    INCLUSION_REPLY,
    NOT_FOUND,
    PARTITION,
    ConsistencyProof,
    ConsistencyQuery,
    InclusionQuery,
    LogConsistencyQuery,
    LogInclusionQuery,
)
from streams.routes.query import parse_query
from streams.routes.status import LOG, parse_count, status_partition
from streams.routes.status_models import CHECKPOINT_NOTE, PartitionQuery
from streams.server.service import Service
from streams.web.auth import Principal
from streams.web.errors import ApiError
from streams.web.responses import json_response
from streams.web.routing import RawRoute, path_segments, routes_of

MUTABLE = {"Cache-Control": "no-cache"}  # tlog-tiles: a checkpoint is not cached for long
IMMUTABLE = {"Cache-Control": "public, max-age=31536000, immutable"}
# Tile paths have 2 to 7 segments after `tile/`: a level, up to five index elements (2**63 / 256
# has 17 digits), and `.p/<W>`.
TILE_SEGMENTS = range(2, 9)
PROOF_TEXT = "text/plain; charset=utf-8"
TILES = (
    "C2SP tlog-tiles: a tile path has a variable number of segments (an index is split in "
    "three-digit elements, an optional .p/<W>), which OpenAPI cannot describe; docs/proofs.md"
)


def _b64(hashes: list[bytes]) -> list[str]:
    return [base64.b64encode(h).decode() for h in hashes]


class LogView:
    """One log (the service's, or a store partition's mirror) as proofs and tiles: its reader,
    its tiles' cache, and its newest signed checkpoint, checked with the log's own vkey."""

    def __init__(self, reader: LogReader) -> None:
        self.reader = reader
        self.key = header_key(reader)
        self.tiles = TileSource(reader)

    def checkpoint(self) -> Checkpoint:
        path = self.reader.log_dir / layout.CHECKPOINT
        try:
            return parse_checkpoint(path.read_text("utf-8"), self.key)
        except FileNotFoundError:
            raise ApiError(404, "not_found", "no checkpoint has been written yet") from None
        except (OSError, UnicodeDecodeError, CheckpointError) as exc:
            # the writer replaces the file atomically and signs what it writes
            raise ApiError(503, "unavailable", f"the checkpoint cannot be read: {exc}") from None

    def checkpoint_of(self, size: int | None) -> Checkpoint:
        if size is None:
            return self.checkpoint()
        newest = self.checkpoint()
        if size == newest.size:
            return newest
        try:
            text, _ = checkpoint_of_size(self.reader, size)
        except InvalidInput:
            # Not there (yet): 404 as for any resource that does not exist. Its own message
            # names the log's directory, which is the server's business.
            raise ApiError(
                404,
                "not_found",
                f"no signed checkpoint of size {size}: the newest has size {newest.size}; older "
                f"ones are those segment.open records embed (multiples of "
                f"{1 << self.reader.seg_bits})",
            ) from None
        return parse_checkpoint(text, self.key)


class ProofsApi:
    def __init__(self, service: Service) -> None:
        self.service = service
        self._views: dict[int, LogView] = {}

    def _view(
        self, request: Request, scope: str, query: PartitionQuery | None = None
    ) -> tuple[Principal, LogView]:
        """The principal and the log it reads: the partition of the path, else of the query's
        `?partition=` (`query`, parsed), else the caller's."""
        principal = self.service.principal(request, scope)
        service = self.service
        given = request.path_params.get("partition")
        if given is not None:
            partition = _partition(given, service.partitions)
            cluster = service.cluster
            foreign = cluster is not None and partition != cluster.partition_of(principal.tenant)
            if foreign and LOG not in principal.scopes:
                raise ApiError(403, "forbidden", "a tenant's token reads its own partition")
        else:
            asked = query.partition if query is not None else None
            partition = status_partition(service, principal, asked)
        view = self._views.get(partition)
        if view is None:
            if service.cluster is None:
                reader = service.reader
            else:
                log_dir = service.cluster.mirror(partition).log_dir
                if not (log_dir / layout.segment_name(0)).exists():
                    raise ApiError(404, "not_found", f"partition {partition} has no records yet")
                reader = LogReader(log_dir)
            view = self._views[partition] = LogView(reader)
        return principal, view

    @operation(
        "getPartitionCheckpoint",
        "a shared store partition's newest signed checkpoint (a C2SP signed note), as text",
        path=PARTITION,
        replies={
            200: CHECKPOINT_NOTE,
            404: Reply(ErrorReply, "not_found: no such partition, or no checkpoint of it yet"),
        },
        tags=("proofs",),
    )
    async def checkpoint(self, request: Request) -> Response:
        """A partition's newest checkpoint, as is (`/v1/log/checkpoint` is streams/routes/status.py's)."""
        _, view = self._view(request, "read")
        return Response(view.checkpoint().text, media_type=PROOF_TEXT, headers=MUTABLE)

    @undescribed(TILES)
    async def tile(self, request: Request) -> Response:
        segments = path_segments(request.scope) or []
        rest = "/".join(segments[segments.index("tile") + 1 :])
        try:
            tile = parse_tile_path(rest)
        except BadTilePath as exc:
            raise ApiError(404, "not_found", f"no such tile: {exc}") from None
        _, view = self._view(request, LOG if tile.is_entries else "read")
        size = view.checkpoint().size
        try:
            data = await asyncio.to_thread(view.tiles.read, tile, size)
        except TileNotFound as exc:
            raise ApiError(404, "not_found", str(exc)) from None
        return Response(data, media_type="application/octet-stream", headers=IMMUTABLE)

    @operation(
        "proveInclusion",
        "RFC 9162 inclusion proof of record `seq` to a signed checkpoint (the newest by default)",
        query=LogInclusionQuery,
        replies={200: INCLUSION_REPLY, 404: NOT_FOUND},
        tags=("proofs",),
    )
    async def log_inclusion(self, request: Request) -> Response:
        return await self.inclusion(request)

    @operation(
        "provePartitionInclusion",
        "RFC 9162 inclusion proof of record `seq` in a shared store's partition",
        query=InclusionQuery,
        path=PARTITION,
        replies={200: INCLUSION_REPLY, 404: NOT_FOUND},
        tags=("proofs",),
    )
    async def partition_inclusion(self, request: Request) -> Response:
        return await self.inclusion(request)

    async def inclusion(self, request: Request) -> Response:
        pairs = request.query_params.multi_items()
        if "partition" in request.path_params:
            query: InclusionQuery = parse_query(InclusionQuery, pairs)
            principal, view = self._view(request, "read")
        else:
            query = logged = parse_query(LogInclusionQuery, pairs)
            principal, view = self._view(request, "read", logged)
        seq, text = query.seq, query.format == "text"
        checkpoint = view.checkpoint_of(query.size)
        if not seq < checkpoint.size:
            # as for a checkpoint not yet written: the proof does not exist (yet)
            raise ApiError(
                404,
                "not_found",
                f"seq {seq} is not covered by the checkpoint of size {checkpoint.size}",
            )
        hashes, line = await asyncio.to_thread(self._inclusion, view, seq, checkpoint.size)
        if LOG not in principal.scopes and _tenant_of(line) != principal.tenant:
            # the same answer as for a seq that does not exist, so ids of others stay unknown
            raise ApiError(404, "not_found", f"no record {seq} of this tenant")
        if text:
            body = format_tlog_proof(seq, hashes, checkpoint.text)
            return Response(body, media_type=PROOF_TEXT)
        return json_response(
            {
                "seq": seq,
                "size": checkpoint.size,
                "leaf": base64.b64encode(leaf_hash_of(line)).decode(),
                "hashes": _b64(hashes),
                "checkpoint": checkpoint.text,
            }
        )

    @staticmethod
    def _inclusion(view: LogView, seq: int, size: int) -> tuple[list[bytes], bytes]:
        line = next(iter(view.reader.lines(seq - 1, seq + 1)))[1]
        return inclusion_proof(seq, size, SubtreeRoots(view.reader)), line

    @operation(
        "proveConsistency",
        "RFC 9162 consistency proof from the tree of `old` records to a signed checkpoint (the "
        "newest by default)",
        query=LogConsistencyQuery,
        replies={200: ConsistencyProof, 404: NOT_FOUND},
        tags=("proofs",),
    )
    async def log_consistency(self, request: Request) -> Response:
        return await self.consistency(request)

    @operation(
        "provePartitionConsistency",
        "RFC 9162 consistency proof between two trees of a shared store's partition",
        query=ConsistencyQuery,
        path=PARTITION,
        replies={200: ConsistencyProof, 404: NOT_FOUND},
        tags=("proofs",),
    )
    async def partition_consistency(self, request: Request) -> Response:
        return await self.consistency(request)

    async def consistency(self, request: Request) -> Response:
        pairs = request.query_params.multi_items()
        if "partition" in request.path_params:
            query: ConsistencyQuery = parse_query(ConsistencyQuery, pairs)
            _, view = self._view(request, "read")
        else:
            query = logged = parse_query(LogConsistencyQuery, pairs)
            _, view = self._view(request, "read", logged)
        old = query.old
        checkpoint = view.checkpoint_of(query.new)
        if old > checkpoint.size:
            # no tree of `old` records precedes it: that proof does not exist (yet)
            raise ApiError(
                404,
                "not_found",
                f"old size {old} is larger than the new checkpoint's size {checkpoint.size}",
            )
        roots = SubtreeRoots(view.reader)
        hashes = await asyncio.to_thread(consistency_proof, old, checkpoint.size, roots)
        return json_response(
            {
                "old": old,
                "new": checkpoint.size,
                "hashes": _b64(hashes),
                "checkpoint": checkpoint.text,
            }
        )


def _partition(given: str, partitions: int) -> int:
    number = parse_count(given)
    if number is None or number >= partitions:
        raise ApiError(404, "not_found", f"partitions are 0..{partitions - 1}")
    return number


def _tenant_of(line: bytes) -> str:
    return orjson.loads(line)["tenant"]


def routes(service: Service) -> list[RawRoute]:
    api = ProofsApi(service)
    table = []
    for prefix in ("/v1/log", "/v1/log/partitions/{partition}"):
        for n in TILE_SEGMENTS:
            params = "/".join(f"{{t{i}}}" for i in range(n))
            table.append((f"{prefix}/tile/{params}", {"GET": api.tile}))
    # /v1/log/checkpoint is streams/routes/status.py's
    table += [
        ("/v1/log/proof/inclusion", {"GET": api.log_inclusion}),
        ("/v1/log/proof/consistency", {"GET": api.log_consistency}),
        ("/v1/log/partitions/{partition}/proof/inclusion", {"GET": api.partition_inclusion}),
        ("/v1/log/partitions/{partition}/checkpoint", {"GET": api.checkpoint}),
        ("/v1/log/partitions/{partition}/proof/consistency", {"GET": api.partition_consistency}),
    ]
    return routes_of(table)
