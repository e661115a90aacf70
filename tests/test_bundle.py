"""`ledgermem export`, `verify-bundle` and `import`: a session's records, provable without the log.

One source log of 3+ segments holds two tenants with the same session id, an item erased inside
the exported session (so the bundle carries a redacted record), a large content, tool calls, an
immutable section, a commit-lifetime section, reads, a config change, and a session id deleted
and created again. Every tampering of a bundle must FAIL (exit 1) or be bad input (exit 2).
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path

import orjson
import pytest
from helpers.cli import ledgermem

from eventstore.checkpoint import SigningKey, sign_checkpoint
from eventstore.reader import LogReader
from eventstore.record import PAY_TAG, Record, encode_line, record_hash
from eventstore.writer import Durability
from replay.bundle import (
    VALID,
    VALID_UNLINKED,
    Bundle,
    BundleRecord,
    build_bundle,
    check_line,
    session_lines,
    verify_bundle,
)
from sections.model.config import MemoryConfig, SectionConfig
from sections.runtime.history import History
from sections.runtime.memory import Memory

CONFIG = MemoryConfig(
    sections=(
        SectionConfig("role", 200, "none", "durable", mutable=False),
        SectionConfig("notes", 40, "fifo", "durable"),
        SectionConfig("findings", 500, "priority", "durable"),
        SectionConfig("messages", 2000, "fifo", "durable"),
        SectionConfig("staged", 500, "fifo", "commit"),
        SectionConfig("documents", None, "none", "durable"),
    ),
    seed_items={"role": ({"content": "You are an auditor.", "kind": "instruction"},)},
)
CALL = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    base = tmp_path_factory.mktemp("bundle")
    data = base / "src"
    facts: dict = {}
    with Memory.open(data, config=CONFIG, seg_bits=3, durability=Durability.UNSAFE_NO_FSYNC) as mem:
        s = mem.session("s1", tenant="acme", metadata={"app": "audit", "user": "u-7"})
        o = mem.session("s1", tenant="other", metadata={"app": "theirs"})
        o.add("notes", "the other tenant's note")
        for i in range(4):
            s.add("notes", f"note {i} " + "n" * 30)  # fifo evicts the oldest
        keep = s.add("findings", "revenue grew", priority=9, tags=["q3"], metadata={"src": "10-K"})
        gone = s.add("findings", "a secret to erase", priority=2, kind="fact")
        o.add("notes", "more of theirs")
        s.add_many(
            "messages",
            [
                {"content": "what is 6*7?", "role": "user"},
                {"content": "", "role": "assistant", "tool_calls": [CALL]},
                {"content": "42", "role": "tool", "tool_call_id": "c1", "name": "lookup"},
            ],
        )
        s.add("documents", "D" * 6000, kind="document", metadata={"pages": 3})
        s.add("staged", "committed draft")
        s.commit("staged")
        s.add("staged", "uncommitted draft")
        s.update("findings", keep.id, content="revenue grew 12%", tags=["q3", "checked"])
        s.get("findings")
        s.configure("notes", budget_tokens=60)
        # The checkpoint an auditor pinned earlier: the session goes on past it.
        mem.writer.checkpoint()
        facts["old_checkpoint"] = (data / "log" / "checkpoint").read_bytes()
        s.erase([gone.id], reason="gdpr-art17")
        s.add("notes", "after the erase")
        r = mem.session("re", tenant="acme")
        r.add("notes", "first incarnation")
        r.delete()
        r = mem.session("re", tenant="acme", metadata={"round": 2})
        r.add("notes", "second incarnation")
        facts["gone_seq"] = gone.seq
        facts["vkey"] = str(mem.key.key.vkey)
    log = data / "log"
    assert len(list(log.glob("seg-*.jsonl"))) >= 3
    facts["base"], facts["data"], facts["log"] = base, data, log
    bundle = base / "s1.bundle"
    result = ledgermem("export", log, "--session", "s1", "--tenant", "acme", bundle)
    assert result.returncode == 0, result.stderr
    facts["bundle"] = bundle
    return facts


def verify_in_process(capsys, path: Path, vkey: str) -> tuple[int, dict | None, str]:
    """The same dispatcher and exit codes as the command, without a process per case."""
    import ledgermem_cli

    capsys.readouterr()
    code = ledgermem_cli.main(["verify-bundle", str(path), "--vkey", vkey, "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out) if code in (0, 1) else None, err


def verify(path: Path, vkey: str) -> tuple[int, dict | None, str]:
    result = ledgermem("verify-bundle", path, "--vkey", vkey, "--json")
    report = json.loads(result.stdout) if result.returncode in (0, 1) else None
    return result.returncode, report, result.stderr.decode()


def load(path: Path) -> dict:
    return json.loads(path.read_bytes())


def save(obj: dict, path: Path) -> Path:
    path.write_bytes(orjson.dumps(obj))
    return path


def line_obj(entry: dict) -> dict:
    return json.loads(entry["line"])


# ---- export and verify ---------------------------------------------------------------------


def test_an_exported_bundle_verifies_alone_without_the_log(src, tmp_path):
    alone = tmp_path / "elsewhere" / "s1.bundle"
    alone.parent.mkdir()
    shutil.copy(src["bundle"], alone)
    code, report, _ = verify(alone, src["vkey"])
    assert code == 0 and report["verdict"] == VALID, report
    assert report["tenant"] == "acme" and report["session"] == "s1"
    assert report["first_type"] == "session.created" and not report["starts_mid_session"]
    assert report["redacted"] == [src["gone_seq"]]  # the erased item's record, payload gone
    assert report["unlinked"] == []
    assert any("follows" in line for line in report["cannot_prove"])


def test_the_bundle_holds_exactly_the_sessions_lines_of_the_log(src):
    bundle = Bundle.from_bytes(src["bundle"].read_bytes())
    reader = LogReader(src["log"])
    expected = [
        line for _, line in reader.lines() if (r := Record.from_line(line)).tenant == "acme"
        and r.session == "s1"
    ]  # fmt: skip
    assert [r.line for r in bundle.records] == expected
    redacted = [r for r in bundle.records if b'"redacted":' in r.line]
    assert len(redacted) == 1 and b"secret" not in src["bundle"].read_bytes()


def test_the_text_report_says_what_a_bundle_proves_and_cannot(src):
    result = ledgermem("verify-bundle", src["bundle"], "--vkey", src["vkey"])
    out = result.stdout.decode()
    assert result.returncode == 0 and out.startswith("VALID ")
    assert "no record of the session is missing between" in out
    assert "cannot prove: that no record of the session follows seq" in out


def test_export_needs_the_tenant_when_two_tenants_share_a_session_id(src, tmp_path):
    result = ledgermem("export", src["log"], "--session", "s1", tmp_path / "b")
    assert result.returncode == 2
    assert b"exists for tenants acme, other: pass --tenant" in result.stderr
    assert not (tmp_path / "b").exists()


def test_export_of_an_unknown_session_is_bad_input(src, tmp_path):
    result = ledgermem("export", src["log"], "--session", "nobody", tmp_path / "b")
    assert result.returncode == 2 and b"no session 'nobody'" in result.stderr


def test_export_takes_the_current_incarnation_of_a_recreated_session(src, tmp_path):
    out = tmp_path / "re.bundle"
    assert ledgermem("export", src["log"], "--session", "re", out).returncode == 0
    code, report, _ = verify(out, src["vkey"])
    assert code == 0 and report["verdict"] == VALID
    records = [line_obj(e) for e in load(out)["records"]]
    assert [r["type"] for r in records] == ["session.created", "item.added"]
    assert records[0]["payload"]["metadata"] == {"round": 2}


def test_export_refuses_a_session_the_checkpoint_does_not_cover_yet(src, tmp_path):
    log = tmp_path / "log"
    shutil.copytree(src["log"], log)
    (log / "checkpoint").write_bytes(src["old_checkpoint"])  # an older, genuine checkpoint
    result = ledgermem("export", log, "--session", "s1", "--tenant", "acme", tmp_path / "b")
    assert result.returncode == 2 and b"--covered-only" in result.stderr
    result = ledgermem(
        "export", log, "--session", "s1", "--tenant", "acme", "--covered-only", tmp_path / "b"
    )
    assert result.returncode == 0, result.stderr
    code, report, _ = verify(tmp_path / "b", src["vkey"])
    size = int(src["old_checkpoint"].split(b"\n")[1])
    assert code == 0 and report["checkpoint"]["size"] == size
    assert report["last_seq"] < size
    # The erase rewrote a record under the old checkpoint; its restatement (the items.erased
    # record) lies beyond it, so that one link is unproven.
    assert report["redacted"] == [src["gone_seq"]]
    assert report["verdict"] == VALID_UNLINKED
    assert report["unlinked"] == [[report["unlinked"][0][0], src["gone_seq"]]]


def test_a_redaction_without_a_restatement_leaves_the_link_unproven(tmp_path):
    with Memory.open(tmp_path / "d", seg_bits=3, durability=Durability.UNSAFE_NO_FSYNC) as mem:
        s = mem.session("s")
        s.add("messages", "one")
        middle = s.add("messages", "two")
        s.add("messages", "three")
        mem.writer.redact([middle.seq], "test", "by-hand")  # no items.erased, no restatement
        vkey = str(mem.key.key.vkey)
    out = tmp_path / "b"
    assert ledgermem("export", tmp_path / "d" / "log", "--session", "s", out).returncode == 0
    code, report, _ = verify(out, vkey)
    assert code == 0 and report["verdict"] == VALID_UNLINKED
    assert report["unlinked"] == [[middle.seq - 1, middle.seq]]
    assert any(f"and seq {middle.seq}" in line for line in report["cannot_prove"])


# ---- what a bundle cannot prove, shown ------------------------------------------------------


def test_dropping_the_last_record_goes_unnoticed_as_documented(src, tmp_path):
    obj = load(src["bundle"])
    obj["records"].pop()
    code, report, _ = verify(save(obj, tmp_path / "b"), src["vkey"])
    assert code == 0 and report["verdict"] == VALID


def test_dropping_the_first_records_is_reported_as_starting_mid_session(src, tmp_path):
    obj = load(src["bundle"])
    del obj["records"][:2]
    code, report, _ = verify(save(obj, tmp_path / "b"), src["vkey"])
    assert code == 0 and report["starts_mid_session"]
    assert any("mid-session" in line for line in report["cannot_prove"])


# ---- tampering --------------------------------------------------------------------------------


def _first(obj: dict, type_: str, section: str | None = None) -> int:
    for i, entry in enumerate(obj["records"]):
        rec = line_obj(entry)
        if rec["type"] == type_ and "payload" in rec and section in (None, rec["section"]):
            return i
    raise AssertionError(type_)


def _set_line(obj: dict, i: int, rec: dict) -> None:
    obj["records"][i]["line"] = orjson.dumps(rec).decode()


def edit_payload(obj, ctx):
    i = _first(obj, "item.added", "findings")
    rec = line_obj(obj["records"][i])
    rec["payload"]["items"][0]["content"] = "revenue fell"
    _set_line(obj, i, rec)


def edit_ts(obj, ctx):
    i = _first(obj, "item.added")
    rec = line_obj(obj["records"][i])
    rec["ts"] += 1
    _set_line(obj, i, rec)


def rehash_edited_record(obj, ctx):
    """A forger who recomputes pd and h: the line checks out, its inclusion proof does not."""
    i = _first(obj, "item.added", "findings")
    rec = line_obj(obj["records"][i])
    rec["payload"]["items"][0]["priority"] = 1
    from eventstore.jcs import canonical

    pd = hashlib.sha256(PAY_TAG + bytes.fromhex(rec["salt"]) + canonical(rec["payload"])).digest()
    names = (rec["tenant"], rec["session"], rec["section"], rec["type"])
    h = record_hash(bytes.fromhex(rec["prev"]), rec["seq"], rec["ts"], *names, pd)
    rec["pd"], rec["h"] = pd.hex(), h.hex()
    _set_line(obj, i, rec)


def drop_middle(obj, ctx):
    del obj["records"][len(obj["records"]) // 2]


def drop_redacted(obj, ctx):
    del obj["records"][next(i for i, e in enumerate(obj["records"]) if '"redacted"' in e["line"])]


def reorder(obj, ctx):
    r = obj["records"]
    r[2], r[3] = r[3], r[2]


def swap_proof_hashes(obj, ctx):
    proof = obj["records"][3]["proof"]
    proof[0], proof[1] = proof[1], proof[0]


def replace_proof_hash(obj, ctx):
    obj["records"][3]["proof"][0] = base64.b64encode(hashlib.sha256(b"forged").digest()).decode()


def shorten_proof(obj, ctx):
    obj["records"][3]["proof"].pop()


def proof_not_base64(obj, ctx):
    obj["records"][3]["proof"][0] = "not base64!"


def other_tenants_record(obj, ctx):
    """A record of the other tenant's session s1, with its own valid proof."""
    theirs = ctx["theirs"]["records"][1]
    obj["records"][3] = theirs


def other_tenants_record_renamed(obj, ctx):
    obj["tenant"] = "other"


def splice_old_incarnation(obj, ctx):
    obj.update(ctx["re_with_history"])


def duplicate_key_in_line(obj, ctx):
    i = _first(obj, "item.added")
    line = obj["records"][i]["line"]
    obj["records"][i]["line"] = line[:-1] + ',"payload":{}}'


def unknown_key_in_line(obj, ctx):
    i = _first(obj, "item.added")
    rec = line_obj(obj["records"][i])
    rec["extra"] = 1
    _set_line(obj, i, rec)


def drop_salt(obj, ctx):
    i = _first(obj, "item.added")
    rec = line_obj(obj["records"][i])
    del rec["salt"]
    _set_line(obj, i, rec)


def forged_checkpoint(obj, ctx):
    """Signed by a key of the same origin that is not the log's."""
    origin = obj["origin"]
    note = obj["checkpoint"].split("\n")
    forger = SigningKey.generate(origin)
    obj["checkpoint"] = sign_checkpoint(forger, int(note[1]), base64.b64decode(note[2]))


def edited_checkpoint_size(obj, ctx):
    lines = obj["checkpoint"].split("\n")
    lines[1] = str(int(lines[1]) + 1)
    obj["checkpoint"] = "\n".join(lines)


def older_genuine_checkpoint(obj, ctx):
    obj["checkpoint"] = ctx["old_checkpoint"].decode()


def no_records(obj, ctx):
    obj["records"] = []


TAMPERING = [
    (edit_payload, 1, "record.pd"),
    (edit_ts, 1, "record.h"),
    (rehash_edited_record, 1, "record.inclusion"),
    (drop_middle, 1, "chain.link"),
    (drop_redacted, 1, "chain.link"),
    (reorder, 1, "record.order"),
    (swap_proof_hashes, 1, "record.inclusion"),
    (replace_proof_hash, 1, "record.inclusion"),
    (shorten_proof, 1, "record.inclusion"),
    (proof_not_base64, 1, "record.proof"),
    (other_tenants_record, 1, "record.session"),
    (other_tenants_record_renamed, 1, "record.session"),
    (splice_old_incarnation, 1, "chain.link"),
    (duplicate_key_in_line, 1, "record.json"),
    (unknown_key_in_line, 1, "record.unknown_key"),
    (drop_salt, 1, "record.payload_salt"),
    (forged_checkpoint, 1, "checkpoint.signature"),
    (edited_checkpoint_size, 1, "checkpoint.signature"),
    (older_genuine_checkpoint, 1, "record.inclusion"),
    (no_records, 1, "bundle.empty"),
]


@pytest.fixture(scope="module")
def ctx(src):
    """Material a forger could get: other bundles of the same log, an older checkpoint."""
    theirs = src["base"] / "theirs.bundle"
    assert (
        ledgermem("export", src["log"], "--session", "s1", "--tenant", "other", theirs).returncode
        == 0
    )
    # Both incarnations of "re" in one bundle, every record with a genuine proof.
    reader = LogReader(src["log"])
    every = [(seq, line) for seq, line in reader.lines() if b'"session":"re"' in line]
    checkpoint = json.loads(src["bundle"].read_bytes())["checkpoint"]
    from eventstore.checkpoint import VerifierKey, parse_checkpoint

    cp = parse_checkpoint(checkpoint, VerifierKey.parse(src["vkey"]))
    spliced = json.loads(build_bundle(reader, "acme", "re", every, cp).to_bytes())
    return {
        "theirs": load(theirs),
        "re_with_history": {"session": "re", "records": spliced["records"]},
        "old_checkpoint": src["old_checkpoint"],
    }


@pytest.mark.parametrize(
    ("tamper", "code", "check"), TAMPERING, ids=[t[0].__name__ for t in TAMPERING]
)
def test_every_kind_of_tampering_fails(src, ctx, tmp_path, capsys, tamper, code, check):
    obj = load(src["bundle"])
    tamper(obj, ctx)
    returncode, report, stderr = verify_in_process(capsys, save(obj, tmp_path / "b"), src["vkey"])
    assert returncode == code, stderr
    assert report["verdict"] == "FAIL" and report["error"]["check"] == check, report["error"]


def test_a_failure_names_the_record_and_the_check(src, tmp_path):
    obj = load(src["bundle"])
    edit_payload(obj, None)
    result = ledgermem("verify-bundle", save(obj, tmp_path / "b"), "--vkey", src["vkey"])
    out = result.stdout.decode()
    i = _first(load(src["bundle"]), "item.added", "findings")
    seq = line_obj(obj["records"][i])["seq"]
    assert result.returncode == 1
    assert f"error: record {i + 1} (seq {seq}): [record.pd]" in out
    assert "proves:" not in out


def test_a_key_of_another_log_fails_on_the_origin(src, tmp_path):
    other = str(SigningKey.generate("ledgermem.local/elsewhere").vkey)
    code, report, _ = verify(src["bundle"], other)
    assert code == 1 and report["error"]["check"] == "bundle.origin"


def test_another_key_of_the_same_origin_fails_on_the_signature(src):
    origin = load(src["bundle"])["origin"]
    code, report, _ = verify(src["bundle"], str(SigningKey.generate(origin).vkey))
    assert code == 1 and report["error"]["check"] == "checkpoint.signature"


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda b: b[: len(b) // 2], b"not a bundle"),
        (lambda b: b"", b"not a bundle"),
        (
            lambda b: b.replace(b'"tenant":"acme",', b'"tenant":"acme","tenant":"other",', 1),
            b"duplicate",
        ),
        (lambda b: b.replace(b"ledgermem.bundle/1", b"ledgermem.bundle/9", 1), b"format"),
        (lambda b: b.replace(b'"session":"s1",', b'"session":"s1","note":1,', 1), b"unknown keys"),
        (lambda b: b"\xff" + b, b"not UTF-8"),
    ],
    ids=["truncated", "empty", "duplicate-key", "other-format", "unknown-key", "not-utf8"],
)
def test_a_damaged_file_is_bad_input(src, tmp_path, mangle, message):
    path = tmp_path / "b"
    path.write_bytes(mangle(src["bundle"].read_bytes()))
    result = ledgermem("verify-bundle", path, "--vkey", src["vkey"])
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert result.stderr.count(b"\n") == 1


def test_a_malformed_vkey_is_bad_input(src):
    result = ledgermem("verify-bundle", src["bundle"], "--vkey", "not-a-key")
    assert result.returncode == 2


# ---- the pure checks -------------------------------------------------------------------------


def test_check_line_accepts_every_line_of_the_log_and_rebuilds_its_hash(src):
    reader = LogReader(src["log"])
    for _, line in reader.lines():
        record = check_line(line)
        assert record.line == line


def test_a_bundle_round_trips_through_its_bytes(src):
    data = src["bundle"].read_bytes()
    bundle = Bundle.from_bytes(data)
    assert bundle.to_bytes() == data
    assert all(isinstance(r, BundleRecord) for r in bundle.records)


def test_session_lines_finds_redacted_records_and_each_tenant(src):
    found = session_lines(LogReader(src["log"]), "s1")
    assert set(found) == {"acme", "other"}
    assert src["gone_seq"] in [seq for seq, _ in found["acme"]]


def test_verify_bundle_in_process_matches_the_command(src):
    from eventstore.checkpoint import VerifierKey

    bundle = Bundle.from_bytes(src["bundle"].read_bytes())
    report = verify_bundle(bundle, VerifierKey.parse(src["vkey"]))
    assert report.verdict == VALID and report.exit_code == 0


def test_a_non_canonical_line_still_verifies_with_a_warning(src):
    from eventstore.checkpoint import VerifierKey

    bundle = Bundle.from_bytes(src["bundle"].read_bytes())
    obj = json.loads(bundle.records[1].line)
    spaced = json.dumps(obj, ensure_ascii=False).encode()  # whitespace, same values
    records = (
        bundle.records[0],
        BundleRecord(spaced, bundle.records[1].proof),
        *bundle.records[2:],
    )
    tampered = Bundle(
        bundle.origin, bundle.vkey, bundle.tenant, bundle.session, bundle.checkpoint, records
    )
    report = verify_bundle(tampered, VerifierKey.parse(src["vkey"]))
    assert report.verdict == VALID and "canonical" in report.warnings[0]


# ---- import ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def target(src):
    """A second data directory that already holds a log of 3+ segments."""
    data = src["base"] / "target"
    with Memory.open(data, seg_bits=3, durability=Durability.UNSAFE_NO_FSYNC) as mem:
        s = mem.session("local")
        for i in range(20):
            s.add("messages", f"local {i}")
        vkey = str(mem.key.key.vkey)
    assert len(list((data / "log").glob("seg-*.jsonl"))) >= 3
    result = ledgermem("import", src["bundle"], "--data", data, "--vkey", src["vkey"])
    assert result.returncode == 0, result.stderr
    return {"data": data, "vkey": vkey, "stdout": result.stdout.decode()}


def _items(state, tenant: str, session: str) -> dict:
    sections = state.sessions[(tenant, session)].sections
    out = {}
    for name, section in sections.items():
        out[name] = [
            (i.content if i.content is not None else "<large>", i.kind, i.role, i.tags,
             i.priority, i.metadata, i.group, i.extra, i.tokens)
            for i in section.items.values()
        ]  # fmt: skip
    return out


def _state(data: Path):
    reader = LogReader(data / "log")
    return History(reader).state_at(reader.head())


def test_import_then_verify_the_target_log(target):
    result = ledgermem("verify", target["data"] / "log", "--vkey", target["vkey"], "--json")
    assert result.returncode == 0, result.stdout
    assert json.loads(result.stdout)["verdict"] == "VALID-LOCAL"


def test_the_imported_session_holds_the_sources_live_items(src, target):
    source = _state(src["data"])
    imported = _state(target["data"])
    tag = hashlib.sha256(load(src["bundle"])["origin"].encode()).hexdigest()[:8]
    session_id = f"imported-{tag}-s1"
    assert session_id in target["stdout"]
    assert _items(imported, "acme", session_id) == _items(source, "acme", "s1")
    new = imported.sessions[("acme", session_id)]
    old = source.sessions[("acme", "s1")]
    assert {n: s.config for n, s in new.sections.items()} == {
        n: s.config for n, s in old.sections.items()
    }  # the config as it was at the end, with the later configure applied
    assert new.sections["notes"].config.budget_tokens == 60
    staged = [(i.content, i.committed) for i in new.sections["staged"].items.values()]
    assert staged == [("committed draft", True), ("uncommitted draft", False)]
    big = next(iter(new.sections["documents"].items.values()))
    reader = LogReader(target["data"] / "log")
    assert History(reader).content_of(big) == "D" * 6000


def test_the_imported_session_records_where_it_came_from(src, target):
    imported = _state(target["data"])
    session = next(s for (t, sid), s in imported.sessions.items() if sid.startswith("imported-"))
    provenance = session.metadata["imported_from"]
    report = json.loads(
        ledgermem("verify-bundle", src["bundle"], "--vkey", src["vkey"], "--json").stdout
    )
    assert provenance == {
        "origin": report["origin"],
        "tenant": "acme",
        "session": "s1",
        "first_seq": report["first_seq"],
        "last_seq": report["last_seq"],
        "checkpoint_size": report["checkpoint"]["size"],
        "bundle_sha256": hashlib.sha256(src["bundle"].read_bytes()).hexdigest(),
        "vkey_source": "auditor",
        "verdict": "VALID",
    }
    assert session.metadata["app"] == "audit"


def test_import_refuses_a_bundle_that_does_not_verify(src, tmp_path):
    obj = load(src["bundle"])
    drop_middle(obj, None)
    result = ledgermem(
        "import", save(obj, tmp_path / "b"), "--data", tmp_path / "t", "--vkey", src["vkey"]
    )
    assert result.returncode == 1 and b"[chain.link]" in result.stderr
    assert b"nothing was imported" in result.stderr and not (tmp_path / "t").exists()


def test_import_refuses_while_a_writer_holds_the_target(src, tmp_path):
    with Memory.open(tmp_path / "t", seg_bits=3, durability=Durability.UNSAFE_NO_FSYNC):
        result = ledgermem("import", src["bundle"], "--data", tmp_path / "t", "--vkey", src["vkey"])
    assert result.returncode == 2 and b"held by another writer" in result.stderr


def test_import_refuses_an_existing_session_id(src, target):
    result = ledgermem("import", src["bundle"], "--data", target["data"], "--vkey", src["vkey"])
    assert result.returncode == 2 and b"pass --session NEW" in result.stderr


def test_import_without_a_vkey_says_the_key_came_from_the_bundle(src, target):
    result = ledgermem(
        "import", src["bundle"], "--data", target["data"], "--session", "copy2", "--tenant", "t2"
    )
    assert result.returncode == 0, result.stderr
    assert b"proves nothing about which log" in result.stderr
    session = _state(target["data"]).sessions[("t2", "copy2")]
    assert session.metadata["imported_from"]["vkey_source"] == "bundle"


def test_a_bundle_whose_session_was_deleted_has_nothing_to_import(src, tmp_path):
    with Memory.open(tmp_path / "d", seg_bits=3, durability=Durability.UNSAFE_NO_FSYNC) as mem:
        s = mem.session("gone")
        s.add("messages", "x")
        s.delete()
    out = tmp_path / "b"
    assert ledgermem("export", tmp_path / "d" / "log", "--session", "gone", out).returncode == 0
    result = ledgermem("import", out, "--data", tmp_path / "t")
    assert result.returncode == 2 and b"session.deleted" in result.stderr


def test_encode_line_is_what_the_bundle_carries(src):
    """Export copies the file's bytes; they are the writer's canonical lines."""
    for entry in Bundle.from_bytes(src["bundle"].read_bytes()).records:
        r = Record.from_line(entry.line)
        payload = None if r.salt is None else entry.line[entry.line.index(b'"payload":') + 10 : -1]
        rebuilt = encode_line(
            r.seq,
            r.ts,
            r.tenant,
            r.session,
            r.section,
            r.type,
            r.prev,
            r.h,
            r.pd,
            r.salt,
            payload,
            r.redacted,
        )
        assert rebuilt == entry.line
