"""The two answers a lost connection can hide, produced on purpose by a cutting TCP proxy.

Between the writer and PostgreSQL sits a small proxy that can cut the writer's connection at
the worst moments: right after the server committed an append but before its reply reaches the
sink (the commit happened: the sink must find its rows in the head and acknowledge, not send
them twice), and right before the append reaches the server (it did not: the sink must send it
again). Either way the callers get their records, exactly once, and the chain stays intact.
"""

from __future__ import annotations

import contextlib
import socket
import threading

import pytest

from eventstore.pg import lease as leases
from eventstore.pg.leadership import open_partition_writer
from eventstore.pg.schema import connect
from eventstore.sink import CommitUnknown
from tests.helpers.pg import pg_url  # noqa: F401
from tests.helpers.pglog import assert_chain, make_store

# In the bound parameters of every append of these records (raw in binary, hex in text).
APPEND_MARKS = (b'"item.added"', b'"item.added"'.hex().encode())


def _is_append(chunk: bytes) -> bool:
    return any(mark in chunk for mark in APPEND_MARKS)


class CuttingProxy:
    """Forwards 127.0.0.1:<port> to the server; `arm(mode)` cuts the next append's connection:
    "after_commit" once the server answered it, "before_send" instead of forwarding it."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.mode: str | None = None
        self.cuts = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, mode: str) -> None:
        with self._lock:
            self.mode = mode

    def _take(self, mode: str) -> bool:
        with self._lock:
            if self.mode == mode:
                self.mode = None
                self.cuts += 1
                return True
            return False

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self._sockets += [client, server]
            state = {"cut_on_reply": False}
            threading.Thread(target=self._up, args=(client, server, state), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, state), daemon=True).start()

    def _up(self, client, server, state) -> None:
        try:
            while chunk := client.recv(1 << 16):
                if _is_append(chunk) and self._take("before_send"):
                    return _close(client, server)
                if _is_append(chunk) and self._take("after_commit"):
                    state["cut_on_reply"] = True
                server.sendall(chunk)
        except OSError:
            pass
        _close(client, server)

    def _down(self, server, client, state) -> None:
        try:
            while chunk := server.recv(1 << 16):
                if state["cut_on_reply"]:  # the server committed and answered: lose the answer
                    return _close(client, server)
                client.sendall(chunk)
        except OSError:
            pass
        _close(client, server)

    def close(self) -> None:
        """Stop listening and cut every connection: the store is unreachable from now on."""
        _close(self._listener, *self._sockets)  # shutdown wakes the accept() blocked on it


def _close(*socks) -> None:
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()


@pytest.mark.parametrize(
    ("mode", "decision"), [("after_commit", "Committed"), ("before_send", "resend")]
)
def test_a_lost_append_is_decided_from_the_head(pg_url, tmp_path, mode, decision):  # noqa: F811
    info, key = make_store(pg_url, tmp_path / "data", seg_bits=3)
    proxy = CuttingProxy(("127.0.0.1", 5432))
    proxied = pg_url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    assert proxied != pg_url
    with connect(pg_url) as conn:
        lease = leases.take(conn, 0, "replica-a", 30.0)
    writer = open_partition_writer(proxied, info, key, 0, lease)
    acked = {}
    try:
        for n in range(30):
            if n % 3 == 1:
                proxy.arm(mode)
            record = writer.append("acme", "s-1", "messages", "item.added", {"n": n})
            acked[record.seq] = n
        results = writer.append_batch(
            [("acme", "s-1", "messages", "item.added", {"n": n}) for n in range(30, 40)]
        )
        acked.update({r.seq: r.payload["n"] for r in results})
    finally:
        writer.close()
        proxy.close()
    assert proxy.cuts == 10
    assert writer._sink.after_loss[decision] == 10, writer._sink.after_loss
    objs = assert_chain(pg_url, info)
    events = [o["payload"]["n"] for o in objs if o["tenant"] == "acme"]
    assert events == list(range(40))  # each exactly once, in order
    for seq, n in acked.items():
        assert objs[seq]["payload"] == {"n": n}


def test_a_store_unreachable_until_the_deadline_acknowledges_nothing(pg_url, tmp_path):  # noqa: F811
    info, key = make_store(pg_url, tmp_path / "data", seg_bits=3)
    proxy = CuttingProxy(("127.0.0.1", 5432))
    proxied = pg_url.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
    with connect(pg_url) as conn:
        lease = leases.take(conn, 0, "replica-a", 1.0)
    writer = open_partition_writer(proxied, info, key, 0, lease, checkpoint_interval=3600)
    first = writer.append("acme", "s-1", "messages", "item.added", {"n": 0})
    proxy.close()
    with pytest.raises(CommitUnknown, match="unreachable"):
        writer.append("acme", "s-1", "messages", "item.added", {"n": 1})
    assert not lease.valid()  # it gave up at its deadline, not before
    assert writer._sink.after_loss["Unknown"] == 1
    writer.close()

    with connect(pg_url) as conn:
        while (successor := leases.take(conn, 0, "replica-b", 10.0)) is None:
            pass
    again = open_partition_writer(pg_url, info, key, 0, successor)
    again.append("acme", "s-1", "messages", "item.added", {"n": 2})
    again.close()
    objs = assert_chain(pg_url, info)
    assert [o["payload"]["n"] for o in objs if o["tenant"] == "acme"] == [0, 2]
    assert objs[first.seq]["payload"] == {"n": 0}
