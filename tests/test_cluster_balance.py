"""balance.plan, the pure rule of who takes or gives up which partition (streams/cluster)."""

from __future__ import annotations

from streams.cluster.balance import HeadView, Plan, plan, share


def heads(*owners: str | None, expired: set[int] = frozenset()) -> list[HeadView]:
    return [HeadView(p, owner, p in expired or owner is None) for p, owner in enumerate(owners)]


def test_share_is_the_ceiling_of_partitions_per_live_replica():
    assert share(2, 2) == 1
    assert share(3, 2) == 2
    assert share(2, 3) == 1
    assert share(4, 0) == 4


def test_a_lone_replica_takes_every_free_partition():
    assert plan(heads(None, None, None), ["a"], "a", set()).take == (0, 1, 2)


def test_two_idle_replicas_reach_for_different_partitions_first():
    a = plan(heads(None, None), ["a", "b"], "a", set())
    b = plan(heads(None, None), ["a", "b"], "b", set())
    assert a.take[0] != b.take[0]
    assert a.take == (0,) and b.take == (1,)


def test_a_replica_over_its_share_gives_one_up_to_an_idle_one():
    decided = plan(heads("a", "a"), ["a", "b"], "a", {0, 1})
    assert decided.take == () and len(decided.release) == 1
    assert decided.release == (1,)  # the one b prefers


def test_nothing_is_given_up_that_was_not_held_long_enough():
    assert plan(heads("a", "a"), ["a", "b"], "a", {0, 1}, releasable=set()) == Plan()


def test_balanced_replicas_do_nothing():
    assert plan(heads("a", "b"), ["a", "b"], "a", {0}) == Plan()
    assert plan(heads("a", "b"), ["a", "b"], "b", {1}) == Plan()


def test_a_replica_at_its_share_leaves_a_free_partition_to_an_idle_one_for_a_grace():
    # b holds its share; c is live and idle: c should get partition 0 first.
    view = heads(None, "b", expired={0})
    assert plan(view, ["b", "c"], "b", {1}).take == ()
    assert plan(view, ["b", "c"], "b", {1}, free_for={0: 5.0}, grace=1.0).take == (0,)
    assert plan(view, ["b", "c"], "c", set()).take == (0,)


def test_when_the_others_are_all_busy_a_free_partition_is_taken_at_once():
    # a stopped (its heartbeat is gone): b leads both, as soon as the lease expired.
    view = heads("a", "b", expired={0})
    assert plan(view, ["b"], "b", {1}).take == (0,)


def test_what_was_given_up_is_left_to_the_others_for_a_while():
    view = heads("a", None)
    decided = plan(view, ["a", "b"], "a", {0}, released={1})
    assert decided.take == ()
    assert plan(view, ["a", "b"], "a", {0}, released={1}, free_for={1: 9.0}).take == (1,)
    # Nobody else is live: take it back at once.
    assert plan(view, ["a"], "a", {0}, released={1}).take == (1,)


def test_leases_held_by_dead_replicas_are_not_taken_before_they_expire():
    view = heads("gone", "gone")
    assert plan(view, ["b"], "b", set()).take == ()
