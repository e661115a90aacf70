"""What the proof routes take and give (streams/routes/proofs_api.py, docs/proofs.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from streams.apidoc import Reply
from streams.apidoc.models import Absent, Count, ErrorReply, Open, Strict, absent
from streams.routes.status_models import PartitionQuery

Format = Literal["json", "text"]
Hash = Annotated[str, Field(pattern=r"^[A-Za-z0-9+/]{43}=$", description="SHA-256, base64")]
SIGNED_SIZE = (
    "the size of a signed checkpoint the log holds: the newest (the default), or one a "
    "segment.open embeds (multiples of the segment size); another is 404"
)
PARTITION = {"partition": (Count, "a shared store's partition, 0..P-1 (another is 404)")}


class InclusionQuery(Strict):
    model_config = ConfigDict(extra="ignore", strict=True)  # other parameters: ignored, as ever

    seq: Count = Field(description="the record to prove; one the checkpoint does not cover is 404")
    size: Count | Absent = absent(SIGNED_SIZE)
    format: Format = Field(
        "json", description="text: the C2SP tlog-proof text of `ledgermem proof --seq`"
    )


class ConsistencyQuery(Strict):
    model_config = ConfigDict(extra="ignore", strict=True)

    old: Count = Field(description="the older tree's size; one past `new` is 404")
    new: Count | Absent = absent(SIGNED_SIZE)


class LogInclusionQuery(InclusionQuery, PartitionQuery):
    pass


class LogConsistencyQuery(ConsistencyQuery, PartitionQuery):
    pass


class InclusionProof(Open):
    """RFC 9162's audit path of record `seq` to the signed checkpoint of `size`."""

    seq: Count
    size: Count
    leaf: Hash = Field(description="the record's leaf hash")
    hashes: list[Hash] = Field(description="the audit path, leaf to root")
    checkpoint: str = Field(description="the signed note of `size` records")


class ConsistencyProof(Open):
    """RFC 9162's consistency proof from the tree of `old` records to the signed one of `new`."""

    old: Count
    new: Count
    hashes: list[Hash]
    checkpoint: str = Field(description="the signed note of `new` records")


INCLUSION_REPLY = Reply(
    InclusionProof, "the proof (format=text: as text)", also=(("text/plain", None),)
)
NOT_FOUND = Reply(
    ErrorReply,
    "not_found: no such proof (yet): a seq or size past the checkpoints the log holds, no "
    "checkpoint yet, or (with tokens) another tenant's record",
)
