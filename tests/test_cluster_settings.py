"""Store mode's settings (flag > environment > TOML) and the stream partition rules, without a
server: what `serve --store` accepts and refuses, and which partition a stream reads."""

from __future__ import annotations

import pytest

from eventstore.errors import InvalidInput
from eventstore.filters import RecordFilter
from eventstore.partitions import partition_of
from streams.fanout.channels.query import parse_partition, parse_subscribe_frame, stream_partition
from streams.server.settings import load_settings
from streams.web.auth import Principal
from streams.web.errors import ApiError

URL = "postgresql://ledgermem@db.internal/ledgermem"


def test_store_mode_is_off_by_default_and_set_by_flag_env_or_toml(tmp_path):
    assert load_settings(env={}).store is None
    assert load_settings(env={"LEDGERMEM_STORE": URL}).store == URL
    toml = tmp_path / "s.toml"
    toml.write_text(
        f'store = "{URL}"\nlease_seconds = 2.5\nadvertise_url = "http://10.0.0.5:8000"\n'
    )
    settings = load_settings(str(toml), env={})
    assert (settings.store, settings.lease_seconds) == (URL, 2.5)
    assert settings.advertise_url == "http://10.0.0.5:8000"
    flags = load_settings(str(toml), env={"LEDGERMEM_LEASE_SECONDS": "3"}, lease_seconds=4.0)
    assert flags.lease_seconds == 4.0
    assert load_settings(str(toml), env={"LEDGERMEM_LEASE_SECONDS": "3"}).lease_seconds == 3.0


@pytest.mark.parametrize(
    "values",
    [
        {"store": "mysql://db/x"},
        {"store": "/var/lib/ledgermem"},
        {"lease_seconds": 0.1},
        {"lease_seconds": float("nan")},
        {"lease_seconds": 10_000},
        {"advertise_url": "10.0.0.5:8000"},
    ],
)
def test_bad_store_settings_are_refused_with_the_setting_named(values):
    with pytest.raises(InvalidInput) as refused:
        load_settings(env={}, **values)
    assert next(iter(values)) in str(refused.value)


class TwoPartitions:
    """What stream_partition needs of the service: P and partition_of."""

    partitions = 2

    class cluster:
        @staticmethod
        def partition_of(tenant: str) -> int:
            return partition_of(tenant, 2)


def tenant_in(partition: int) -> str:
    return next(f"t{n}" for n in range(100) if partition_of(f"t{n}", 2) == partition)


OPERATOR = Principal("default", frozenset(("read", "write", "admin")))


def test_an_unscoped_stream_names_its_partition_when_there_are_several():
    service, everything = TwoPartitions(), RecordFilter.of()
    assert stream_partition(1, everything, OPERATOR, False, service) == 1
    with pytest.raises(ApiError) as refused:
        stream_partition(None, everything, OPERATOR, False, service)
    assert refused.value.status == 400 and "0..1" in refused.value.message


def test_a_tenant_picks_its_partition_and_a_contradicting_one_is_refused():
    service = TwoPartitions()
    t0, t1 = tenant_in(0), tenant_in(1)
    assert stream_partition(None, RecordFilter.of(tenant=[t1]), OPERATOR, False, service) == 1
    token = Principal(t0, frozenset(("read",)))
    assert stream_partition(None, RecordFilter.of(tenant=[t0]), token, True, service) == 0
    for given, where in (
        (1, RecordFilter.of(tenant=[t0])),
        (None, RecordFilter.of(tenant=[t0, t1])),
    ):
        with pytest.raises(ApiError):
            stream_partition(given, where, OPERATOR, False, service)


def test_partition_numbers_are_checked_and_one_partition_needs_none():
    assert parse_partition(None, 2) is None
    assert parse_partition("1", 2) == 1 and parse_partition(0, 1) == 0
    for bad in ("2", "-1", "one", "1.0", True, 2):
        with pytest.raises(ApiError):
            parse_partition(bad, 2)

    class OnePartition:
        partitions = 1

    assert stream_partition(None, RecordFilter.of(), OPERATOR, False, OnePartition()) == 0


def test_the_websocket_first_frame_may_name_the_partition():
    assert parse_subscribe_frame('{"after": 3, "partition": 1}') == (3, {}, 1)
    assert parse_subscribe_frame("{}") == (-1, {}, None)
    with pytest.raises(ApiError):
        parse_subscribe_frame('{"partitions": 1}')
