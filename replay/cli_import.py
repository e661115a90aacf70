"""`ledgermem import BUNDLE --data DIR [--session NEW] [--tenant T] [--vkey V]`.

Replays a verified bundle into another data directory as a new session. The bundle is checked
first (with the auditor's `--vkey`, or else with the key the bundle names, which is said), and
nothing is written unless it verifies. The bundle's records are folded with the sections
projection onto a fresh state; the session that fold leaves at the bundle's end is recreated:
its section config (session.created's, with any later section.configured applied), its
metadata plus `imported_from` (origin, source tenant and session, first and last seq,
checkpoint size, the bundle's sha256, where the key came from, the verdict), and its live items, section by
section in their original order, with content, tags, priority, metadata, kind, role, group and
rendering fields. Immutable sections get their items as the new session's seed. In
`commit`-lifetime sections the committed items (always the oldest ones) are committed again.

New item ids, read counts, the lru clock and the turn counter start afresh: they are positions
in the source log, which the target does not hold. Import takes DIR's writer lock, so it refuses
while a service runs there.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from dataclasses import dataclass

from eventstore.checkpoint import VerifierKey
from eventstore.errors import BadKey, InvalidInput
from eventstore.identifiers import CONTROL_TENANT, check_identifier, is_identifier
from eventstore.layout import DataDir
from eventstore.record import Record
from eventstore.wording import count
from sections.errors import SessionExists
from sections.model.compaction import compacted_content
from sections.model.config import MemoryConfig
from sections.model.item import Item
from sections.model.projection import apply
from sections.model.state import MemoryState, SessionState
from sections.model.tokens import TokenCounter
from sections.runtime.memory import Memory

from .bundle import (
    Bundle,
    BundleError,
    BundleReport,
    read_bundle,
    restatements,
    verify_bundle,
)
from .cli_verify_bundle import read_vkey


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", metavar="BUNDLE", help="a file written by `ledgermem export`")
    parser.add_argument(
        "--data", required=True, metavar="DIR", help="the data directory to import into"
    )
    parser.add_argument(
        "--session",
        metavar="NEW",
        help="the new session's id (default: imported-<8 hex of the origin's sha256>-<session>)",
    )
    parser.add_argument(
        "--tenant", metavar="T", help="the new session's tenant (default: the bundle's tenant)"
    )
    parser.add_argument(
        "--vkey",
        metavar="VKEY",
        help="the source log's vkey (or @FILE); without it the key the bundle names is used, "
        "which proves nothing about where the bundle came from",
    )


@dataclass
class SectionImport:
    name: str
    committed: list[dict]  # added, then committed (commit-lifetime sections only)
    items: list[dict]


@dataclass
class ImportPlan:
    config: MemoryConfig  # the source session's sections, and its immutable items as seed
    metadata: dict
    sections: list[SectionImport]
    count: int  # items in all, seeds included


def run(args: argparse.Namespace) -> int:
    bundle, data = read_bundle(args.bundle)
    if args.vkey is not None:
        vkey, source = read_vkey(args.vkey), "auditor"
    else:
        try:
            vkey, source = VerifierKey.parse(bundle.vkey), "bundle"
        except BadKey as exc:
            raise BundleError(f"the bundle names no usable vkey ({exc}): pass --vkey") from None
        print(
            "ledgermem import: no --vkey: checking the bundle with the key it names, which "
            "proves nothing about which log it came from",
            file=sys.stderr,
        )
    report = verify_bundle(bundle, vkey, source)
    failure = report.error
    if failure is not None:
        where = "the bundle" if failure.record is None else f"record {failure.record}"
        if failure.seq is not None:
            where += f" (seq {failure.seq})"
        print(
            f"ledgermem import: {args.bundle} does not verify: {where}: [{failure.check}] "
            f"{failure.message}; nothing was imported",
            file=sys.stderr,
        )
        return 1
    plan = plan_import(bundle, report, hashlib.sha256(data).hexdigest())
    tenant = check_identifier("tenant", args.tenant or bundle.tenant)
    if tenant == CONTROL_TENANT:
        raise InvalidInput("tenant '_log' holds the log's control records, not sessions")
    session_id = args.session or default_session_id(bundle)
    check_identifier("session", session_id)
    created = not DataDir(args.data).signing_key.exists()
    with Memory.open(args.data, config=plan.config) as mem:
        check_budgets(plan, mem.counter)
        try:
            mem.create_session(session_id, tenant=tenant, metadata=plan.metadata)
        except SessionExists:
            raise InvalidInput(
                f"session {session_id!r} of tenant {tenant!r} already exists in {args.data}: "
                "pass --session NEW"
            ) from None
        session = mem.session(session_id, tenant=tenant, create=False)
        for section in plan.sections:
            if section.committed:
                session.add_many(section.name, section.committed)
                session.commit(section.name)
            if section.items:
                session.add_many(section.name, section.items)
        held = session.info()["items"]
    if held != plan.count:
        raise InvalidInput(
            f"session {tenant}/{session_id} holds {held} items, not the bundle's {plan.count}: "
            "the target's token counter must have counted differently and evicted some"
        )
    if created:
        print(f"ledgermem import: created the data directory {args.data}", file=sys.stderr)
    print(
        f"imported {count(plan.count, 'item')} of {bundle.tenant}/{bundle.session} from {bundle.origin} "
        f"(seq {report.first_seq}..{report.last_seq}, {report.verdict}) as session "
        f"{tenant}/{session_id}"
    )
    return 0


def default_session_id(bundle: Bundle) -> str:
    tag = hashlib.sha256(bundle.origin.encode("utf-8")).hexdigest()[:8]
    session_id = f"imported-{tag}-{bundle.session}"
    if not is_identifier(session_id):
        raise InvalidInput(
            f"the default session id {session_id!r} is longer than 128 characters: pass --session"
        )
    return session_id


def plan_import(bundle: Bundle, report: BundleReport, bundle_sha256: str) -> ImportPlan:
    """What to create, from a bundle that verified. Pure."""
    records = [Record.from_line(entry.line) for entry in bundle.records]
    session = session_at_end(bundle.tenant, bundle.session, records)
    if session is None:
        if report.starts_mid_session:
            raise InvalidInput(
                f"the bundle starts mid-session (seq {report.first_seq}): without the session's "
                "session.created there is no section config to import"
            )
        raise InvalidInput(
            f"the session no longer exists at the bundle's end ({report.last_type} at seq "
            f"{report.last_seq}): nothing to import"
        )
    by_seq = {record.seq: record for record in records}
    seed: dict[str, tuple[dict, ...]] = {}
    sections: list[SectionImport] = []
    count = 0
    for name, section in session.sections.items():
        items = sorted(section.items.values(), key=lambda i: i.order)
        inputs = [item_input(item, by_seq) for item in items]
        count += len(inputs)
        if not section.config.mutable:
            if inputs:
                seed[name] = tuple(inputs)
        elif section.config.lifetime == "commit":
            # A commit marks everything the section holds, so the committed items come first.
            n = next((k for k, item in enumerate(items) if not item.committed), len(items))
            sections.append(SectionImport(name, inputs[:n], inputs[n:]))
        else:
            sections.append(SectionImport(name, [], inputs))
    provenance = {
        "origin": bundle.origin,
        "tenant": bundle.tenant,
        "session": bundle.session,
        "first_seq": report.first_seq,
        "last_seq": report.last_seq,
        "checkpoint_size": report.checkpoint_size,
        "bundle_sha256": bundle_sha256,
        "vkey_source": report.vkey_source,
        "verdict": report.verdict,
    }
    metadata = dict(session.metadata)
    if "imported_from" in metadata:
        provenance["via"] = metadata["imported_from"]
    metadata["imported_from"] = provenance
    config = MemoryConfig(
        sections=tuple(s.config for s in session.sections.values()),
        seed_items=seed or None,
        token_counter=session.counter["name"],  # counted again as the source counted them
    )
    return ImportPlan(config, metadata, sections, count)


def session_at_end(tenant: str, session: str, records: list[Record]) -> SessionState | None:
    """The session that the bundle's records, folded with the sections projection onto a fresh
    state, leave at the bundle's end. Erased records apply through their restatements."""
    restated = restatements(records)
    state = MemoryState()
    for record in records:
        apply(state, record, lambda seq, _redacted: restated.get(seq))
    return state.sessions.get((tenant, session))


def item_input(item: Item, records: dict[int, Record]) -> dict:
    """The item as `add_many` takes it."""
    content = item.content if item.content is not None else _logged_content(item, records)
    data: dict = {"content": content}
    for name in ("kind", "role", "group"):
        value = getattr(item, name)
        if value is not None:
            data[name] = value
    if item.tags:
        data["tags"] = list(item.tags)
    if item.priority:
        data["priority"] = item.priority
    if item.metadata:
        data["metadata"] = item.metadata
    data.update(item.extra)  # name, tool_calls, tool_call_id
    return data


def _logged_content(item: Item, records: dict[int, Record]) -> object:
    """A large content, kept out of the state, read back from the record that set it."""
    record = records.get(item.content_seq)
    if record is None or record.salt is None:
        raise InvalidInput(
            f"item {item.id}'s content is in seq {item.content_seq}, whose payload the bundle "
            "does not hold"
        )
    payload = record.payload
    assert isinstance(payload, dict)  # the memory's records carry objects (sections/)
    if record.type == "item.updated":
        return payload["set"]["content"]
    found, content = compacted_content(payload.get("compacted") or {}, item.id)
    if found:  # a summary or a cut tool output (docs/compaction.md)
        return content
    if "items" in payload:
        items = payload["items"]
    else:
        items = [i for v in payload["seed"].values() for i in v]
    return items[item.k]["content"]


def check_budgets(plan: ImportPlan, counter: TokenCounter) -> None:
    """Refuse before writing anything if the target's counter makes a section overflow."""
    budgets = {s.name: s.budget_tokens for s in plan.config.sections}
    for section in plan.sections:
        budget = budgets[section.name]
        if budget is None:
            continue
        total = 0
        for data in section.committed + section.items:
            total += counter.count(data["content"])
            if data.get("tool_calls"):
                total += counter.count(data["tool_calls"])
        if total > budget:
            raise InvalidInput(
                f"section {section.name!r}: the items need {total} tokens by this data "
                f"directory's counter ({counter.name}), more than the budget of {budget}"
            )
