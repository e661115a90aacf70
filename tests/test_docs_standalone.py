"""The repository stands alone: no file points outside it for the format or the wire, and the
worked example of docs/format.md is recomputed from the page's own text, so it cannot drift."""

from __future__ import annotations

import base64
import hashlib
import re
import struct
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from eventstore import record
from eventstore.checkpoint import VerifierKey
from eventstore.jcs import jcs_reference

ROOT = Path(__file__).resolve().parent.parent
FORMAT = ROOT / "docs" / "format.md"
VECTORS = ROOT / "tests" / "vectors"

# Built from parts so that this file does not cite them itself.
OUTSIDE = ("../" + "shared", "shared/" + "spec", "/work/" + "shared", "shared/" + "research")


def tracked_files() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: no list of tracked files")
    return [name for name in out.decode().split("\0") if name]


def test_no_tracked_file_cites_files_outside_the_repository():
    offenders = []
    for name in tracked_files():
        path = ROOT / name
        if not path.is_file():
            continue  # deleted in the work tree
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary
        text = data.decode("utf-8", "replace")
        for number, line in enumerate(text.splitlines(), 1):
            if any(needle in line for needle in OUTSIDE):
                offenders.append(f"{name}:{number}: {line.strip()[:120]}")
    assert offenders == [], "files citing outside the repository:\n" + "\n".join(offenders)


def test_the_format_and_wire_docs_exist_and_cited_sections_exist():
    sections = {int(n) for n in re.findall(r"^## (\d+)\. ", FORMAT.read_text(), re.M)}
    assert sections >= set(range(1, 13))
    assert (ROOT / "docs" / "wire.md").is_file()
    cited = set()
    for name in tracked_files():
        if name.endswith((".py", ".md")):
            path = ROOT / name
            if path.is_file():
                text = path.read_text(encoding="utf-8", errors="replace")
                for group in re.findall(r"docs/format\.md,? sections? ([\d, and to]+)", text):
                    cited |= {int(n) for n in re.findall(r"\d+", group)}
    assert cited, "no code cites docs/format.md sections"
    assert cited <= sections, f"cited sections missing from docs/format.md: {cited - sections}"


def worked_example() -> dict[str, list[str]]:
    """Every `name = value` line of the ```worked-example blocks, in order (a name may repeat)."""
    values: dict[str, list[str]] = {}
    for block in re.findall(r"```worked-example\n(.*?)```", FORMAT.read_text(), re.S):
        for line in block.splitlines():
            name, _, value = line.partition("=")
            values.setdefault(name.strip(), []).append(value.strip())
    return values


def one(values: dict[str, list[str]], name: str) -> str:
    found = set(values[name])
    assert len(found) == 1, f"{name} has different values in docs/format.md: {found}"
    return found.pop()


def sample_record(seq: int) -> tuple[bytes, dict]:
    for segment in sorted((VECTORS / "sample-log").glob("seg-*.jsonl")):
        for line in segment.read_bytes().splitlines():
            if line.startswith(b'{"v":1,"seq":%d,' % seq):
                return line, orjson.loads(line)
    raise AssertionError(f"seq {seq} is not in the sample log")


def test_worked_example_recomputes_from_the_text_of_the_doc():
    v = worked_example()
    seq, ts = int(one(v, "seq")), int(one(v, "ts"))
    idents = [one(v, k) for k in ("tenant", "session", "section", "type")]
    prev, salt = bytes.fromhex(one(v, "prev")), bytes.fromhex(one(v, "salt"))
    payload = one(v, "payload").encode()

    # Step 1: the JCS bytes are the payload as the doc writes it, and what our JCS makes of it.
    jcs = bytes.fromhex(one(v, "jcs_hex"))
    assert jcs == payload
    assert jcs_reference(orjson.loads(payload)) == jcs

    # Step 2: pd, from the tag, the salt and the JCS bytes.
    pd = hashlib.sha256(b"ledgermem/v1 payload\n" + salt + jcs).digest()
    assert pd.hex() == one(v, "pd")

    # Step 3: the preimage, piece by piece as the doc lists them.
    assert bytes.fromhex(one(v, "tag")) == b"ledgermem/v1 record\n"
    assert one(v, "seq_u64") == struct.pack(">Q", seq).hex()
    assert one(v, "ts_i64") == struct.pack(">q", ts).hex()
    pieces = []
    for key, ident in zip(("tenant_l", "session_l", "section_l", "type_l"), idents, strict=True):
        assert one(v, key) == (struct.pack(">H", len(ident)) + ident.encode()).hex()
        pieces.append(bytes.fromhex(one(v, key)))
    preimage = (
        bytes.fromhex(one(v, "tag"))
        + prev
        + bytes.fromhex(one(v, "seq_u64"))
        + bytes.fromhex(one(v, "ts_i64"))
        + b"".join(pieces)
        + pd
    )
    assert len(preimage) == 136
    assert preimage == record.preimage(prev, seq, ts, *idents, pd)

    # Step 4: h, the RFC 6962 leaf hash of the preimage.
    h = hashlib.sha256(b"\x00" + preimage).hexdigest()
    assert h == one(v, "h")

    # And the record in the file is exactly that record.
    line, rec = sample_record(seq)
    assert (rec["seq"], rec["ts"], rec["prev"], rec["salt"]) == (seq, ts, prev.hex(), salt.hex())
    assert [rec[k] for k in ("tenant", "session", "section", "type")] == idents
    assert (rec["pd"], rec["h"]) == (pd.hex(), h)
    assert orjson.dumps(rec["payload"], option=orjson.OPT_SORT_KEYS) == jcs
    assert line.decode() in FORMAT.read_text()  # the line the doc shows is the file's line

    # Genesis: the prev of seq 0.
    origin = one(v, "origin")
    genesis = hashlib.sha256(b"ledgermem/v1 genesis\n" + origin.encode()).hexdigest()
    assert genesis == one(v, "genesis") == sample_record(0)[1]["prev"]


def test_checkpoint_example_and_key_id_match_the_vectors():
    text = FORMAT.read_text()
    checkpoint = (VECTORS / "sample-log" / "checkpoint").read_text()
    assert checkpoint in text
    vectors = orjson.loads((VECTORS / "vectors.json").read_bytes())
    origin, public = vectors["origin"], bytes.fromhex(vectors["key"]["public_key"])
    key_id = hashlib.sha256(origin.encode() + b"\n\x01" + public).digest()[:4]
    assert f"it is `{key_id.hex()}`" in text
    key_b64 = base64.b64encode(b"\x01" + public).decode()
    vkey = f"{origin}+{key_id.hex()}+{key_b64}"
    assert vkey in text and VerifierKey.parse(vkey).origin == origin
    signature = checkpoint.rsplit(" ", 1)[1]
    assert base64.b64decode(signature)[:4] == key_id
    assert signature.startswith("78F/h") and "`78F/h`" in text


def test_the_standalone_snippet_in_the_doc_prints_pd_and_h():
    snippet = re.search(r"```python\n(.*?)```", FORMAT.read_text(), re.S).group(1)
    out = subprocess.run(
        [sys.executable, "-c", snippet], capture_output=True, text=True, check=True
    ).stdout.split()
    v = worked_example()
    assert out == [one(v, "pd"), one(v, "h")]
