"""Proofs for monitors and witnesses: C2SP tlog-tiles over HTTP, proof routes, and
`ledgermem proof --consistency`.

The tiles are checked twice: against our own Merkle code and the records' `h`, and by Go's
`golang.org/x/mod/sumdb/tlog` (an independent implementation, built from Debian's packages),
which authenticates every tile against the signed root and proves every record from them.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import httpx
import orjson
import pytest
from helpers.cli import ledgermem
from server import Server

from eventstore.checkpoint import VerifierKey, parse_checkpoint
from eventstore.merkle import root, verify_consistency, verify_inclusion
from eventstore.reader import LogReader
from eventstore.tiles import (
    WIDTH,
    BadTilePath,
    TileId,
    available,
    encode_index,
    parse_tile_path,
    split_bundle,
)
from eventstore.writer import Durability
from sections.runtime.memory import Memory
from tests.helpers.described import conforms
from tests.helpers.pg import pg_url  # noqa: F401  (the fixture)
from tests.helpers.replicas import leading, make_replicas, replica, wait_until

RECORDS = 700  # past two full level-0 tiles, so level 1 has a partial tile of width 2
GO_SOURCE = Path(__file__).parent / "go" / "tlogtiles"
GOPATH = Path("/usr/share/gocode")  # Debian's golang-golang-x-mod-dev


# ---- the pure core -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("index", "path"),
    [(0, "000"), (7, "007"), (999, "999"), (1000, "x001/000"), (1234067, "x001/x234/067")],
)
def test_an_index_is_three_digit_elements_all_but_the_last_prefixed_x(index, path):
    assert encode_index(index) == path
    assert parse_tile_path(f"0/{path}") == TileId(0, index)


def test_paths_round_trip_for_tiles_partial_tiles_and_entry_bundles():
    for tile in (TileId(0, 5), TileId(3, 1234067, 17), TileId(None, 2), TileId(None, 1000, 1)):
        assert tile.path().startswith("tile/")
        assert parse_tile_path(tile.path().removeprefix("tile/")) == tile
    assert TileId(None, 1000, 1).path() == "tile/entries/x001/000.p/1"
    assert TileId(2, 3, 255).path() == "tile/2/003.p/255"


@pytest.mark.parametrize(
    "bad",
    ["0", "00/000", "01/000", "64/000", "0/0000", "0/00", "0/x000/005", "0/001/002",
     "0/000.p/0", "0/000.p/256", "0/000.p/07", "0/000.p", "x/000", "0/abc", "entries/1"],
)  # fmt: skip
def test_every_other_spelling_names_no_tile(bad):
    with pytest.raises(BadTilePath):
        parse_tile_path(bad)


def test_a_tree_of_70000_has_the_tiles_the_spec_lists():
    """The tlog-tiles example: 273 full level-0 tiles and one of width 112, one full level-1
    tile and one of width 17, one level-2 tile of width 1, and nothing more."""
    size = 70_000

    def widths(level):
        found = []
        for index in range(300):
            for width in (WIDTH, *range(1, WIDTH)):
                if available(TileId(level, index, width), size):
                    largest = (
                        width
                        if width == WIDTH
                        else max(
                            w for w in range(1, WIDTH) if available(TileId(level, index, w), size)
                        )
                    )
                    found.append(largest)
                    break
        return found

    assert widths(0) == [WIDTH] * 273 + [112]
    assert widths(1) == [WIDTH, 17]
    assert widths(2) == [1]
    assert widths(3) == []


def test_a_bundle_splits_back_into_its_entries():
    entries = [b"", b"a", bytes(range(256)) * 3]
    packed = b"".join(len(e).to_bytes(2, "big") + e for e in entries)
    assert split_bundle(packed) == entries


# ---- a served log -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    """700 records in segments of 64 (so segment.open checkpoints at every multiple of 64),
    one of them erased (a redacted line keeps its leaf), served by a real `ledgermem serve`."""
    data = tmp_path_factory.mktemp("tiles") / "data"
    with Memory.open(data, seg_bits=6, durability=Durability.UNSAFE_NO_FSYNC) as mem:
        s = mem.session("s", tenant="acme")
        for i in range(RECORDS):
            s.add("messages", f"message {i}")
        erased = s.add("messages", "erase me")
        s.erase([erased.id], reason="test")
        vkey = str(mem.key.key.vkey)
    with Server(data) as server:
        yield {"data": data, "url": server.url, "vkey": vkey, "reader": LogReader(data / "log")}


def checkpoint_of(log) -> tuple[int, bytes]:
    text = httpx.get(log["url"] + "/v1/log/checkpoint").text
    lines = text.split("\n")
    return int(lines[1]), base64.b64decode(lines[2])


def get(log, path: str, **params) -> httpx.Response:
    return httpx.get(log["url"] + path, params=params, timeout=30)


def hashes_of(data: bytes) -> list[bytes]:
    return [data[i : i + 32] for i in range(0, len(data), 32)]


def test_level_0_tiles_are_the_records_h_and_entries_hash_to_them(log):
    size, signed_root = checkpoint_of(log)
    assert size > RECORDS
    leaves = log["reader"].leaf_hashes(0, size)
    assert root(leaves) == signed_root
    for index in range(size // WIDTH + 1):
        width = min(WIDTH, size - index * WIDTH)
        suffix = f".p/{width}" if width < WIDTH else ""
        tile = get(log, f"/v1/log/tile/0/{encode_index(index)}{suffix}")
        assert tile.status_code == 200
        assert tile.headers["content-type"] == "application/octet-stream"
        assert "immutable" in tile.headers["cache-control"]
        assert hashes_of(tile.content) == leaves[index * WIDTH : index * WIDTH + width]
        bundle = get(log, f"/v1/log/tile/entries/{encode_index(index)}{suffix}")
        entries = split_bundle(bundle.content)
        assert [hashlib.sha256(b"\x00" + e).digest() for e in entries] == hashes_of(tile.content)


def test_a_level_1_hash_is_the_root_of_a_full_level_0_tile(log):
    size, _ = checkpoint_of(log)
    leaves = log["reader"].leaf_hashes(0, size)
    full = size // WIDTH
    tile = get(log, f"/v1/log/tile/1/000.p/{full}")
    assert hashes_of(tile.content) == [
        root(leaves[i * WIDTH : (i + 1) * WIDTH]) for i in range(full)
    ]
    narrower = get(log, "/v1/log/tile/1/000.p/1")  # a smaller tree's tile: a prefix
    assert narrower.content == tile.content[:32]


def test_tiles_past_the_signed_tree_are_not_found(log):
    size, _ = checkpoint_of(log)
    edge = encode_index(size // WIDTH)
    for path in (
        f"/v1/log/tile/0/{edge}.p/{size % WIDTH + 1}",  # one leaf wider than the tree
        f"/v1/log/tile/0/{edge}",  # the right edge is partial
        "/v1/log/tile/1/000",
        "/v1/log/tile/2/000.p/1",
        "/v1/log/tile/entries/009",
        "/v1/log/tile/0/0000",
        "/v1/log/tile/entries/000.p/0",
    ):
        answer = get(log, path)
        assert answer.status_code == 404, path
        assert answer.json()["error"]["code"] == "not_found"


def test_the_proof_routes_verify_against_the_signed_root(log):
    size, signed_root = checkpoint_of(log)
    leaves = log["reader"].leaf_hashes(0, size)
    for seq in (0, 1, 255, 256, size - 1):
        answer = get(log, "/v1/log/proof/inclusion", seq=seq).json()
        assert answer["size"] == size and base64.b64decode(answer["leaf"]) == leaves[seq]
        path = [base64.b64decode(h) for h in answer["hashes"]]
        verify_inclusion(seq, size, leaves[seq], path, signed_root)
    for old in (0, 1, 64, 100, 511, size):
        answer = get(log, "/v1/log/proof/consistency", old=old).json()
        assert answer["new"] == size
        path = [base64.b64decode(h) for h in answer["hashes"]]
        verify_consistency(old, size, root(leaves[:old]), signed_root, path)


def test_tiles_and_proofs_are_not_reads_of_memory_and_append_nothing(log):
    """They carry hashes (and, in bundles, identifiers): no item's content, so no trace."""
    size, _ = checkpoint_of(log)
    head = log_head(log)
    for path, params in (
        ("/v1/log/tile/0/000", {}), ("/v1/log/tile/1/000.p/1", {}),
        ("/v1/log/tile/entries/000", {}), ("/v1/log/proof/inclusion", {"seq": 3}),
        ("/v1/log/proof/consistency", {"old": 5}),
    ):  # fmt: skip
        answer = get(log, path, **params)
        assert answer.status_code == 200 and b"message 3" not in answer.content
    assert log_head(log) == head


def log_head(log) -> int:
    return httpx.get(log["url"] + "/readyz", timeout=10).json()["head"]


def test_the_proof_routes_refuse_bad_input_with_json(log):
    for path, params in (
        ("/v1/log/proof/inclusion", {}),
        ("/v1/log/proof/inclusion", {"seq": "-1"}),
        ("/v1/log/proof/inclusion", {"seq": "1", "format": "xml"}),
        ("/v1/log/proof/inclusion", {"seq": "9" * 5000}),  # past what int() converts: no 500
        ("/v1/log/proof/inclusion", {"seq": str(2**53)}),
        ("/v1/log/proof/consistency", {"old": "x"}),
        ("/v1/log/proof/consistency", {"old": "1", "partition": "p"}),
        ("/v1/log/checkpoint", {"partition": "-1"}),
    ):
        answer = get(log, path, **params)
        assert answer.status_code == 400, (path, params)
        assert answer.json()["error"]["code"] == "invalid_input"


def test_a_proof_the_log_holds_no_checkpoint_for_is_404_and_names_no_server_path(log):
    """A size not (yet) signed, a seq or old size past the checkpoint: that proof does not
    exist, as a record that does not exist; and the answer says so without the data directory."""
    size, _ = checkpoint_of(log)
    for path, params in (
        ("/v1/log/proof/inclusion", {"seq": str(size)}),
        ("/v1/log/proof/inclusion", {"seq": "1", "size": "3"}),  # no checkpoint of 3
        ("/v1/log/proof/inclusion", {"seq": "1", "size": str(size + 1)}),  # not yet
        ("/v1/log/proof/consistency", {"old": str(size + 1)}),
        ("/v1/log/proof/consistency", {"old": "1", "new": "3"}),
        ("/v1/log/proof/consistency", {"old": "1", "partition": "1"}),  # one log: partition 0
        ("/v1/log/checkpoint", {"partition": "1"}),
        ("/v1/log/partitions/1/proof/inclusion", {"seq": "1"}),
    ):
        answer = get(log, path, **params)
        assert answer.status_code == 404, (path, params, answer.text)
        error = answer.json()["error"]
        assert error["code"] == "not_found" and str(log["data"]) not in error["message"]
    message = get(log, "/v1/log/proof/inclusion", seq=1, size=3).json()["error"]["message"]
    assert f"no signed checkpoint of size 3: the newest has size {size}" in message
    assert get(log, "/v1/log/proof/inclusion", seq=1, partition=0).status_code == 200


def test_openapi_describes_the_proofs_and_status_from_their_models(log):
    """Each generated operation of streams/routes/proofs_api.py and streams/routes/status.py names its
    parameters and answers, and a real answer validates against the schema it gives."""
    doc = get(log, "/openapi.json").json()
    paths = doc["paths"]

    def validate(answer: httpx.Response, path: str, status: str = "200") -> None:
        content = paths[path]["get"]["responses"][status]["content"]
        schema = content[answer.headers["content-type"].split(";")[0]]["schema"]
        instance = answer.json() if "json" in answer.headers["content-type"] else answer.text
        conforms(doc, schema, instance)

    size, _ = checkpoint_of(log)
    for path, params in (
        ("/v1/log/proof/inclusion", {"seq": 5}),
        ("/v1/log/proof/inclusion", {"seq": 5, "format": "text"}),
        ("/v1/log/proof/consistency", {"old": 64}),
        ("/v1/log/partitions/0/proof/inclusion", {"seq": 5, "size": 64}),
        ("/v1/log/partitions/0/proof/consistency", {"old": 5}),
        ("/v1/log/partitions/0/checkpoint", {}),
        ("/v1/log/checkpoint", {}),
        ("/v1/log/status", {}),
        ("/readyz", {}),
        ("/healthz", {}),
        ("/metrics", {}),
    ):
        answer = get(log, path, **params)
        assert answer.status_code == 200, (path, answer.text)
        validate(answer, path.replace("/partitions/0/", "/partitions/{partition}/"))
    validate(get(log, "/v1/log/proof/inclusion", seq=size), "/v1/log/proof/inclusion", "404")
    inclusion = paths["/v1/log/proof/inclusion"]["get"]
    assert inclusion["operationId"] == "proveInclusion"
    parameters = {p["name"]: p for p in inclusion["parameters"]}
    assert parameters["seq"]["required"] and parameters["seq"]["schema"]["minimum"] == 0
    assert parameters["format"]["schema"]["enum"] == ["json", "text"]
    ids = {op.get("operationId") for methods in paths.values() for op in methods.values()}
    assert {
        "getCheckpoint", "getPartitionCheckpoint", "proveConsistency", "provePartitionInclusion",
        "provePartitionConsistency", "checkHealth", "checkReady", "getMetrics", "getLogStatus",
    } <= ids  # fmt: skip
    assert not any("{t0}" in path for path in paths)  # the tiles are undescribed (docs/proofs.md)


def test_an_inclusion_proof_as_text_verifies_offline(log, tmp_path):
    text = get(log, "/v1/log/proof/inclusion", seq=5, format="text").text
    (tmp_path / "proof").write_text(text)
    line = dict(log["reader"].lines(4, 6))[5]
    (tmp_path / "record").write_bytes(line)
    result = ledgermem(
        "proof", "--verify", tmp_path / "proof", "--record", tmp_path / "record",
        "--vkey", log["vkey"],
    )  # fmt: skip
    assert result.returncode == 0 and result.stdout.startswith(b"VALID"), result.stdout


# ---- ledgermem proof --consistency --------------------------------------------------------------


def test_a_consistency_proof_is_a_witness_request_body_that_verifies(log, tmp_path):
    size, _ = checkpoint_of(log)
    result = ledgermem("proof", log["data"] / "log", "--consistency", "128", "head")
    assert result.returncode == 0, result.stderr
    body = result.stdout.decode()
    head, _, checkpoint = body.partition("\n\n")
    assert head.split("\n")[0] == "old 128" and checkpoint.split("\n")[1] == str(size)
    (tmp_path / "proof").write_text(body)
    # the older checkpoint a monitor kept: the one segment 2's open record embeds (size 128)
    old = ledgermem("proof", log["data"] / "log", "--consistency", "0", "128")
    (tmp_path / "old").write_text(old.stdout.decode().partition("\n\n")[2])
    verify = ledgermem(
        "proof", "--verify-consistency", tmp_path / "proof", "--old-checkpoint",
        tmp_path / "old", "--vkey", log["vkey"],
    )  # fmt: skip
    assert verify.returncode == 0 and b"extends the tree of 128" in verify.stdout, verify.stdout
    tampered = body.replace(head.split("\n")[1], base64.b64encode(b"\x00" * 32).decode())
    (tmp_path / "bad").write_text(tampered)
    verify = ledgermem(
        "proof", "--verify-consistency", tmp_path / "bad", "--old-checkpoint", tmp_path / "old",
        "--vkey", log["vkey"],
    )  # fmt: skip
    assert verify.returncode == 1 and verify.stdout.startswith(b"FAIL")


def test_consistency_proofs_match_the_http_route(log):
    size, _ = checkpoint_of(log)
    result = ledgermem("proof", log["data"] / "log", "--consistency", "300", str(size))
    hashes = result.stdout.decode().partition("\n\n")[0].split("\n")[1:]
    assert hashes == get(log, "/v1/log/proof/consistency", old=300).json()["hashes"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--consistency", "-1", "head"), b"not a record count"),
        (("--consistency", "800", "head"), b"larger than the signed tree"),
        (("--consistency", "1", "5"), b"no signed checkpoint of size 5"),
    ],
)
def test_bad_consistency_arguments_are_one_line_and_exit_2(log, args, says):
    result = ledgermem("proof", log["data"] / "log", *args)
    assert result.returncode == 2 and says in result.stderr, result.stderr
    assert result.stderr.count(b"\n") == 1


# ---- an independent client: Go's x/mod/sumdb/tlog ---------------------------------------------


@pytest.fixture(scope="module")
def go_client(tmp_path_factory):
    go = shutil.which("go")
    if go is None or not (GOPATH / "src/golang.org/x/mod/sumdb/tlog").is_dir():
        if os.environ.get("CI"):
            pytest.fail("CI needs Go and golang.org/x/mod (.ci/run installs golang-go and "
                        "golang-golang-x-mod-dev)")  # fmt: skip
        pytest.skip("Go's tile client needs Debian's golang-go and golang-golang-x-mod-dev")
    return build_go_client(tmp_path_factory.mktemp("go") / "tlogtiles")


def build_go_client(binary: Path) -> Path:
    """Build in GOPATH mode against Debian's golang.org/x/mod: nothing is downloaded."""
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": str(GOPATH),
           "GOCACHE": str(binary.parent / "gocache"), "GOFLAGS": ""}  # fmt: skip
    subprocess.run(
        [shutil.which("go"), "build", "-o", str(binary), "."],
        cwd=GO_SOURCE, env=env, check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return binary


def test_go_s_tlog_follows_the_tiles_and_proves_every_record(log, go_client, tmp_path):
    size, signed_root = checkpoint_of(log)
    old = ledgermem("proof", log["data"] / "log", "--consistency", "0", "320")
    (tmp_path / "old").write_text(old.stdout.decode().partition("\n\n")[2])
    result = subprocess.run(
        [go_client, log["url"] + "/v1/log", log["vkey"], tmp_path / "old"],
        capture_output=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    seen = orjson.loads(result.stdout)
    assert seen["size"] == size and base64.b64decode(seen["root"]) == signed_root
    assert seen["entries_checked"] == size  # every entry hashed to its authenticated leaf
    assert seen["old_size"] == 320
    # Go computed the consistency proof from the tiles alone: byte for byte ours
    assert seen["consistency"] == get(log, "/v1/log/proof/consistency", old=320).json()["hashes"]


def test_go_s_tlog_refuses_a_checkpoint_signed_by_another_key(log, go_client):
    other = "ledgermem.local/other+01020304+AaxWz5n8uoGSEYXvXmkCAUtwP5KBfvdgB9HC9HqWjBxw"
    result = subprocess.run(
        [go_client, log["url"] + "/v1/log", other], capture_output=True, timeout=60
    )
    assert result.returncode == 1


def test_with_tokens_entry_bundles_are_the_operator_s_and_proofs_a_tenant_s_own(log, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(log["data"], data)
    tokens = {
        "LEDGERMEM_TOKENS": "reader:acme:read,other:beta:read,op:ops:read+log,"
        "eraser:acme:read+write+admin"
    }
    with Server(data, env=tokens) as server:

        def status(path: str, token: str, **params) -> int:
            headers = {"authorization": f"Bearer {token}"}
            return httpx.get(server.url + path, params=params, headers=headers).status_code

        assert status("/v1/log/tile/0/000", "reader") == 200
        assert status("/v1/log/tile/entries/000", "reader") == 403
        assert status("/v1/log/tile/entries/000", "op") == 200
        # A tenant's admin (erasure) is not the log scope (issue 30, item 7).
        assert status("/v1/log/tile/entries/000", "eraser") == 403
        assert status("/v1/log/proof/inclusion", "eraser", seq=3) == 200  # its own record
        assert status("/v1/log/proof/inclusion", "reader", seq=3) == 200  # acme's record
        assert status("/v1/log/proof/inclusion", "other", seq=3) == 404  # not beta's
        assert status("/v1/log/proof/inclusion", "op", seq=3) == 200
        assert status("/v1/log/tile/0/000", "nobody") == 401
        # a tenant's status: the operator's keys, its own figures (streams/routes/status_models.py)
        doc = httpx.get(server.url + "/openapi.json").json()
        schema = doc["paths"]["/v1/log/status"]["get"]["responses"]["200"]["content"]
        mine = httpx.get(server.url + "/v1/log/status", headers={"authorization": "Bearer reader"})
        assert mine.json()["scope"] == "tenant"
        conforms(doc, schema["application/json"]["schema"], mine.json())


def test_in_store_mode_each_partition_is_a_tiled_log_on_every_replica(pg_url, tmp_path):  # noqa: F811
    """Two partitions, one replica: each partition's checkpoint and tiles under its own prefix,
    signed by its own key, and Go's client follows each one."""
    info, (data,) = make_replicas(pg_url, tmp_path, 1, partitions=2)
    with replica(data, pg_url, 1.0) as server:
        wait_until(lambda: leading(server) == {0, 1}, what="leadership")
        for n in range(20):
            httpx.put(f"{server.url}/v1/sessions/s{n}", timeout=10).raise_for_status()
        for partition in (0, 1):
            prefix = f"{server.url}/v1/log/partitions/{partition}"
            vkey = info.vkeys[partition]

            def signed_size(prefix=prefix, vkey=vkey) -> int:
                text = httpx.get(prefix + "/checkpoint", timeout=10).text
                return parse_checkpoint(text, VerifierKey.parse(vkey)).size

            # the mirror's checkpoint follows the leader's: wait until it covers some records
            wait_until(lambda f=signed_size: f() > 0, what=f"a checkpoint of partition {partition}")
            size = signed_size()
            tile = httpx.get(prefix + f"/tile/0/000.p/{min(size, 255)}", timeout=10)
            assert tile.status_code == 200 and len(tile.content) == 32 * min(size, 255)
            if shutil.which("go") and (GOPATH / "src/golang.org/x/mod/sumdb/tlog").is_dir():
                binary = tmp_path / "tlogtiles"
                if not binary.exists():
                    build_go_client(binary)
                seen = subprocess.run([binary, prefix, vkey], capture_output=True, timeout=120)
                assert seen.returncode == 0, seen.stderr
                assert orjson.loads(seen.stdout)["entries_checked"] >= size
        assert httpx.get(f"{server.url}/v1/log/partitions/2/checkpoint").status_code == 404
