"""Observations of a user (docs/search.md, "Users"): a tenant-wide observation may belong to one
user (`metadata.user_id`); a session sees its own, the tenant's and its user's (session metadata
`user_id`), never another user's, in its context, its search and a capture rule's inject trace.
The dedup tiers compare within one user. The search index keeps each document's user and
agrees with one built anew from the state."""

from __future__ import annotations

import pytest
from helpers.searchindex import fresh_index_dump, index_dump

from eventstore.errors import InvalidInput
from sections.errors import UserConflict
from sections.model.names import TENANT_SESSION
from sections.retrieval import inject
from sections.retrieval.search import SearchIndex
from sections.runtime.memory import Memory


@pytest.fixture
def mem(tmp_path):
    memory = Memory.open(tmp_path / "data")
    memory.create_session("ana-1", metadata={"user_id": "ana"})
    memory.create_session("ana-2", metadata={"user_id": "ana"})
    memory.create_session("bob-1", metadata={"user_id": "bob"})
    memory.create_session("none-1")
    yield memory
    memory.close()


def context_text(mem: Memory, session: str, **options) -> str:
    messages = mem.session(session).context(8000, observations=10, **options)
    return "\n".join(m["content"] for m in messages if isinstance(m.get("content"), str))


def pool(mem: Memory, session: str) -> set[str]:
    return mem.read(
        lambda state: {
            item.content for _, item in inject.observation_pool(state, "default", session)
        }
    )


def test_a_session_sees_its_own_the_tenants_and_its_users_observations(mem):
    mine = mem.session("ana-1").observe("preference", "Tone", "ana likes terse answers")
    assert mine.session == TENANT_SESSION  # a session with a user: the user's, by default
    (item,) = mem.session("_tenant", create=False).get("observations")
    assert (item.metadata["user_id"], item.metadata["session"]) == ("ana", "ana-1")
    mem.observe("decision", "Bob", "bob deploys on fridays", user="bob")
    mem.observe("decision", "All", "the tenant uses postgres")
    mem.session("none-1").observe("learning", "Shared", "retries back off")  # no user: tenant's
    mem.session("bob-1").observe("learning", "Own", "bob's own note", scope="session")

    everyone = {"the tenant uses postgres", "retries back off"}
    assert pool(mem, "ana-2") == everyone | {"ana likes terse answers"}
    assert pool(mem, "bob-1") == everyone | {"bob deploys on fridays", "bob's own note"}
    assert pool(mem, "none-1") == everyone
    assert "ana likes terse answers" in context_text(mem, "ana-2")
    for other in ("bob-1", "none-1"):
        text = context_text(mem, other)
        assert "the tenant uses postgres" in text and "ana likes terse answers" not in text
    # a search for the words: the best match is ana's, and bob's context never shows it
    text = context_text(mem, "bob-1", query="ana likes terse answers")
    assert "ana likes terse answers" not in text and "bob deploys on fridays" in text


def test_searches_leave_out_other_users(mem):
    mem.session("ana-1").add("messages", "ana asked about the invoice export", role="user")
    mem.session("bob-1").add("messages", "bob asked about the invoice export", role="user")
    ana = mem.session("ana-1").observe("discovery", "Invoices", "invoice export runs at 2am")
    wide = mem.observe("discovery", "Invoices", "invoice export is tenant-wide", user=None)

    def found(hits) -> set[str]:
        return {h.item.content for h in hits}

    assert found(mem.session("ana-2").search("invoice export")) == {
        "invoice export runs at 2am", "invoice export is tenant-wide",
    }  # fmt: skip
    assert found(mem.session("bob-1").search("invoice export")) == {
        "bob asked about the invoice export", "invoice export is tenant-wide",
    }  # fmt: skip
    assert found(mem.search("invoice export", user="bob")) == {
        "bob asked about the invoice export", "invoice export is tenant-wide",
    }  # fmt: skip
    assert ana.id in {h.item.id for h in mem.search("invoice export")}  # the tenant sees all
    assert wide.id in {h.item.id for h in mem.search("invoice export", user="ana")}
    assert index_dump(mem.search_index) == fresh_index_dump(mem)


def test_the_tiers_compare_within_one_user(mem):
    key = {"topic_key": "tone"}
    a = mem.session("ana-1").observe("preference", "Tone", "terse", **key)
    b = mem.session("bob-1").observe("preference", "Tone", "terse", **key)
    t = mem.observe("preference", "Tone", "terse", **key)
    assert len({a.id, b.id, t.id}) == 3 and {a.tier, b.tier, t.tier} == {"inserted"}
    again = mem.session("ana-2").observe("preference", "Tone", "verbose", **key)
    assert (again.id, again.tier, again.revision) == (a.id, "revised", 2)
    dup = mem.observe("learning", "x", "same words", user="ana")
    other = mem.observe("learning", "x", "same words", user="bob")
    assert other.id != dup.id and other.tier == "inserted"
    assert mem.observe("learning", "x", "SAME  words", user="ana").tier == "duplicate"


def test_scopes_and_refusals(mem):
    head = mem.read(lambda state: state.seq)
    with pytest.raises(UserConflict, match="no user"):  # 409 user_conflict over HTTP
        mem.session("none-1").observe("learning", "t", "c", scope="user")
    with pytest.raises(InvalidInput):
        mem.observe("learning", "t", "c", session="ana-1", user="ana")
    with pytest.raises(InvalidInput):
        mem.observe("learning", "t", "c", user="")
    with pytest.raises(InvalidInput):  # a session's user is its own
        mem.session("ana-1").observe("learning", "t", "c", user="bob")
    with pytest.raises(InvalidInput):  # source cannot forge an owner
        mem.observe("learning", "t", "c", source={"user_id": "ana"})
    assert mem.read(lambda state: state.seq) == head
    wide = mem.session("ana-1").observe("learning", "t", "for all", scope="tenant")
    (item,) = [i for i in mem.session("_tenant").get("observations") if i.id == wide.id]
    assert "user_id" not in item.metadata
    own = mem.session("ana-1").observe("learning", "t", "only here", scope="session")
    assert own.session == "ana-1"


def test_a_snapshot_index_of_an_older_format_is_built_anew(tmp_path):
    old = SearchIndex()
    with old.lock:  # an image saved by code before documents kept their users (format 2)
        old._db.execute("ALTER TABLE docs DROP COLUMN owner")
        old._db.execute("UPDATE meta SET value = '2' WHERE key = 'format'")
    image = old.serialize()
    old.close()
    with pytest.raises(Exception, match="another format"):
        SearchIndex(image)


def test_an_owner_filtered_search_finds_that_users_documents_and_the_tenants_own(mem):
    """`Query.owners` (recall's scope, matched inside FTS5): the documents of the sessions of
    those users and the tenant's observations of no user or of them; nothing else."""
    from sections.retrieval.search import Query

    for sid in ("ana-1", "ana-2", "bob-1", "none-1"):
        mem.session(sid).add("messages", f"kiwi note from {sid}", role="user")
    mem.observe("learning", "t", "kiwi for everyone")
    mem.observe("learning", "t", "kiwi for ana", user="ana")
    mem.observe("learning", "t", "kiwi for bob", user="bob")
    index = mem.search_index

    def found(owners):
        hits = index.search("default", Query("kiwi", top_k=50, owners=owners))
        return {mem.session(h.session).get(h.section, [h.id])[0].content for h in hits}

    assert found(("ana",)) == {"kiwi note from ana-1", "kiwi note from ana-2",
                               "kiwi for everyone", "kiwi for ana"}  # fmt: skip
    assert found((None,)) == {"kiwi note from none-1", "kiwi for everyone"}
    assert found(("bob", "ana")) == found(("ana",)) | {"kiwi note from bob-1", "kiwi for bob"}
