"""What health, readiness and the log's status answer (streams/routes/status.py, docs/service.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from streams.apidoc import Header, Reply
from streams.apidoc.models import Absent, Count, Open, Strict, absent
from streams.fanout.channel_models import Cursor

NO_CACHE = Header("Cache-Control", "no-cache: a newer checkpoint may replace it at any time")
# The checkpoint file as is, under /v1/log/checkpoint and each partition's (streams/routes/proofs_api.py).
CHECKPOINT_NOTE = Reply(description="the signed note", media_type="text/plain", headers=(NO_CACHE,))
Subscribers = Annotated[
    dict[str, Count], Field(description="open subscribers by channel: sse, ws, jsonl, longpoll")
]


class PartitionQuery(Strict):
    model_config = ConfigDict(extra="ignore", strict=True)  # other parameters: ignored, as ever

    partition: Count | Absent = absent(
        "with a shared store: the operator's partition to read (0 by default; 0..P-1, another "
        "is 404); a tenant's token reads its own. Without a store the one partition is 0"
    )


class ServiceHealth(Open):
    status: Literal["ok"]


class ReadyPartition(Open):
    partition: Count
    head: Cursor = Field(description="this replica's mirror's newest seq")
    leader: str | None = Field(description="the replica leading it; null while none holds it")
    leading: bool = Field(description="whether this replica leads it")


class ServiceReady(Open):
    status: Literal["ready"]
    head: Cursor | Absent = absent("the log's newest seq (without a shared store)")
    partitions: list[ReadyPartition] | Absent = absent("with a shared store: every partition")


class StatusCheckpoint(Open):
    size: Count | None = Field(description="records it covers; null when there is none to read")
    age_seconds: float | None = Field(description="seconds since it was written")
    error: str | Absent = absent("why there are no figures")


class StatusVerifier(Open):
    """The background verifier's verdict (streams/server/verifier.py)."""

    state: str = Field(description="catching_up, ok or failed")
    verified_through: Cursor | None = Field(description="the newest seq checked")
    checkpoint_verified: Count | None = Field(description="the newest checkpoint size checked")
    error: str | None


class StatusFsync(Open):
    count: Count | None
    mean_ms: float | None


class LogStatus(Open):
    """The operator's status of the service's own log."""

    scope: Literal["log"]
    origin: str = Field(description="the log's name, as its checkpoints give it")
    vkey: str = Field(description="the key its checkpoints are signed with")
    head: Cursor
    checkpoint: StatusCheckpoint
    subscribers: Subscribers
    verifier: StatusVerifier | None
    fsync: StatusFsync


class StorePartitionStatus(Open):
    partition: Count
    head: Cursor = Field(description="this replica's mirror's newest seq")
    leader: str | None
    epoch: int | None
    leading: bool
    lease_until: str | None = Field(description="ISO-8601")
    origin: str
    vkey: str
    checkpoint: StatusCheckpoint
    verifier: StatusVerifier | None


class StoreStatus(Open):
    """The operator's status on a replica of a shared store: every partition."""

    scope: Literal["store"]
    origin: str
    replica: str
    partitions: list[StorePartitionStatus]
    subscribers: Subscribers
    stream_traces_skipped: Count


class TenantStatus(Open):
    """A tenant's token's status: the operator's keys, with its own figures and null where only
    a log-wide figure exists (or where another replica leads its partition)."""

    scope: Literal["tenant"]
    tenant: str
    partition: Count | Absent = absent("with a shared store: the tenant's")
    origin: str
    vkey: str
    sessions: Count | None
    items: Count | None
    appends: Count = Field(description="its records made durable since the service started")
    head: Cursor | None = Field(description="its newest record's seq")
    subscribers: Subscribers
    checkpoint: StatusCheckpoint
    verifier: StatusVerifier | None
    fsync: StatusFsync


Status = Annotated[LogStatus | StoreStatus | TenantStatus, Field(discriminator="scope")]
