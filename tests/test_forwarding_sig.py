"""The replica signature (streams/cluster/replica_sig.py) and the secret's loading, as pure functions."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from eventstore.errors import InvalidInput
from streams.cluster.replica_secret import ENV, load_replica_secret, secret_path
from streams.cluster.replica_sig import (
    AT_HEADER,
    MAX_AGE,
    PRINCIPAL_HEADER,
    SIG_HEADER,
    ForwardRefused,
    decode_principal,
    encode_principal,
    request_target,
    sign,
    verify,
)

SECRET = b"0123456789abcdef0123456789abcdef"
NOW = 1_800_000_000.25
TARGET = "/v1/sessions/s%2F1/items?reader=agent"


def _signed(tenant="acme", scopes=frozenset({"read", "write"}), method="POST", target=TARGET):
    return sign(SECRET, method, target, tenant, scopes, NOW)


def test_the_signature_is_the_hmac_of_the_documented_message():
    headers = _signed()
    assert headers[PRINCIPAL_HEADER] == "acme:read,write"
    assert headers[AT_HEADER] == str(int(NOW))
    message = f"POST\n{TARGET}\nacme:read,write\n{int(NOW)}".encode()
    assert headers[SIG_HEADER] == hmac.new(SECRET, message, hashlib.sha256).hexdigest()


def test_a_valid_signature_gives_the_principal_back():
    forwarded = verify(SECRET, "POST", TARGET, _signed(), NOW + 5)
    assert forwarded.tenant == "acme" and forwarded.scopes == {"read", "write"}


@pytest.mark.parametrize("tenant", ["acme", "org:team", "a@b.c/d+e-f", "t:read,write"])
def test_tenants_holding_colons_survive_the_round_trip(tenant):
    scopes = frozenset({"admin", "read"})
    assert decode_principal(encode_principal(tenant, scopes)).tenant == tenant
    assert (
        verify(SECRET, "GET", "/", sign(SECRET, "GET", "/", tenant, scopes, NOW), NOW).scopes
        == scopes
    )


def test_empty_scopes_are_kept_empty():
    assert (
        verify(
            SECRET, "GET", "/", _signed(scopes=frozenset(), method="GET", target="/"), NOW
        ).scopes
        == frozenset()
    )


@pytest.mark.parametrize(
    "change",
    [
        {"method": "PUT"},
        {"target": "/v1/sessions/s%2F2/items?reader=agent"},
        {"target": "/v1/sessions/s%2F1/items?reader=operator"},
        {"target": "/v1/sessions/s/1/items?reader=agent"},  # the encoding is signed too
    ],
)
def test_a_signature_covers_method_path_and_query(change):
    request = {"method": "POST", "target": TARGET, **change}
    with pytest.raises(ForwardRefused, match="does not match"):
        verify(SECRET, request["method"], request["target"], _signed(), NOW)


def test_another_principal_under_the_same_signature_is_refused():
    headers = {**_signed(), PRINCIPAL_HEADER: "globex:read,write"}
    with pytest.raises(ForwardRefused, match="does not match"):
        verify(SECRET, "POST", TARGET, headers, NOW)
    headers = {**_signed(scopes=frozenset({"read"})), PRINCIPAL_HEADER: "acme:admin,read"}
    with pytest.raises(ForwardRefused, match="does not match"):
        verify(SECRET, "POST", TARGET, headers, NOW)


def test_another_secret_is_refused():
    with pytest.raises(ForwardRefused, match="does not match"):
        verify(b"another secret, long enough....", "POST", TARGET, _signed(), NOW)


def test_no_secret_configured_refuses_every_forwarded_request():
    with pytest.raises(ForwardRefused, match="no replica secret"):
        verify(None, "POST", TARGET, _signed(), NOW)


@pytest.mark.parametrize("offset", [MAX_AGE + 1, -(MAX_AGE + 1), 3600, -3600])
def test_the_replay_window_is_thirty_seconds_either_way(offset):
    headers = _signed()
    verify(SECRET, "POST", TARGET, headers, NOW + (MAX_AGE if offset > 0 else -MAX_AGE) * 0.99)
    with pytest.raises(ForwardRefused, match="old"):
        verify(SECRET, "POST", TARGET, headers, NOW + offset)


@pytest.mark.parametrize(
    "headers, message",
    [
        ({PRINCIPAL_HEADER: "acme:read"}, "needs all of"),
        ({PRINCIPAL_HEADER: "acme:read", SIG_HEADER: "0" * 64}, "needs all of"),
        ({PRINCIPAL_HEADER: "acme:read", SIG_HEADER: "0" * 64, AT_HEADER: "-1"}, "unix seconds"),
        ({PRINCIPAL_HEADER: "acme:read", SIG_HEADER: "0" * 64, AT_HEADER: "1e9"}, "unix seconds"),
        ({PRINCIPAL_HEADER: "acme:read", SIG_HEADER: "ZZ", AT_HEADER: "1"}, "hex"),
        ({PRINCIPAL_HEADER: "acme:read", SIG_HEADER: "A" * 64, AT_HEADER: "1"}, "hex"),
    ],
)
def test_malformed_headers_are_refused_by_name(headers, message):
    with pytest.raises(ForwardRefused, match=message):
        verify(SECRET, "GET", "/", headers, NOW)


@pytest.mark.parametrize("principal", ["acme", ":read", "acme:READ", "acme:re ad"])
def test_malformed_principals_are_refused_even_when_signed(principal):
    timestamp = int(NOW)
    from streams.cluster.replica_sig import signature

    headers = {
        PRINCIPAL_HEADER: principal,
        SIG_HEADER: signature(SECRET, "GET", "/", principal, timestamp),
        AT_HEADER: str(timestamp),
    }
    with pytest.raises(ForwardRefused, match="principal"):
        verify(SECRET, "GET", "/", headers, NOW)


def test_the_target_is_the_raw_path_plus_the_query_when_there_is_one():
    assert request_target(b"/v1/sessions/a%2Fb", b"") == "/v1/sessions/a%2Fb"
    assert request_target(b"/v1/search", b"q=x%20y&limit=3") == "/v1/search?q=x%20y&limit=3"


def test_the_secret_comes_from_the_environment_first(tmp_path):
    secret_path(tmp_path).parent.mkdir()
    secret_path(tmp_path).write_bytes(b"from-the-file-0123456789\n")
    assert load_replica_secret(tmp_path, {}) == b"from-the-file-0123456789"
    assert (
        load_replica_secret(tmp_path, {ENV: " from-the-env-0123456789 "})
        == b"from-the-env-0123456789"
    )


def test_no_secret_anywhere_is_none(tmp_path):
    assert load_replica_secret(tmp_path, {}) is None


def test_a_short_secret_is_refused_naming_where_it_came_from(tmp_path):
    with pytest.raises(InvalidInput, match=ENV):
        load_replica_secret(tmp_path, {ENV: "short"})
    secret_path(tmp_path).parent.mkdir()
    secret_path(tmp_path).write_bytes(b"short\n")
    with pytest.raises(InvalidInput, match="replica.secret"):
        load_replica_secret(tmp_path, {})
