"""partition_of is fixed forever: these vectors are the ones docs/scale-out.md lists."""

import pytest

from eventstore.errors import InvalidInput
from eventstore.partitions import partition_of, partition_origin

VECTORS = [  # tenant, P -> partition
    ("default", 2, 1),
    ("default", 16, 13),
    ("acme", 4, 0),
    ("tenant-1", 3, 2),
    ("tenant-2", 4, 0),
    ("globex", 4, 3),
    ("日本語", 16, 3),
]


@pytest.mark.parametrize(("tenant", "partitions", "expected"), VECTORS)
def test_vectors(tenant, partitions, expected):
    assert partition_of(tenant, partitions) == expected


def test_one_partition_holds_everyone():
    assert {partition_of(f"t{i}", 1) for i in range(100)} == {0}


def test_spread_is_even_enough():
    counts = [0] * 4
    for i in range(4000):
        counts[partition_of(f"tenant-{i}", 4)] += 1
    assert min(counts) > 900, counts


@pytest.mark.parametrize("bad", [0, -1, 1025, 2.0, "2", True])
def test_bad_partition_counts_are_refused(bad):
    with pytest.raises(InvalidInput, match="partitions"):
        partition_of("acme", bad)


def test_partition_origin():
    assert partition_origin("example.com/mem", 3) == "example.com/mem/p3"
