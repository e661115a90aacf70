"""Prometheus metrics of the service, in their own registry (one per service instance)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from eventstore.record import Record

CHANNELS = ("sse", "ws", "jsonl", "longpoll")
FORWARD_OUTCOMES = ("answered", "retried", "rerouted", "no_leader", "unreachable")


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.appends = Counter("ledgermem_appends", "Records made durable", registry=r)
        self.fsync = Histogram(
            "ledgermem_fsync_seconds",
            "Latency of each fdatasync of the log (one per group commit)",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
            registry=r,
        )
        self.records_per_fsync = Histogram(
            "ledgermem_records_per_fsync",
            "Lines made durable by one fdatasync",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096),
            registry=r,
        )
        self.subscribers = Gauge(
            "ledgermem_subscribers", "Open subscribers", ["channel"], registry=r
        )
        self.served_records = Counter(
            "ledgermem_records_served",
            "Records sent to subscribers",
            ["channel", "source"],
            registry=r,
        )
        self.subscriber_lag = Histogram(
            "ledgermem_subscriber_lag_records",
            "Records a subscriber was behind the head when it was served",
            ["channel"],
            buckets=(0, 1, 10, 100, 1000, 10_000, 100_000),
            registry=r,
        )
        self.head = Gauge("ledgermem_log_head_seq", "Seq of the newest durable record", registry=r)
        self.verifier_ok = Gauge(
            "ledgermem_verifier_ok",
            "1 while the background verifier finds the log intact",
            registry=r,
        )
        self.verified = Gauge(
            "ledgermem_verified_through_seq", "Last seq the background verifier checked", registry=r
        )
        self.write_failures = Counter(
            "ledgermem_write_failures",
            "Failed writes, fsyncs or checkpoints that made the service refuse writes",
            registry=r,
        )
        self.reopen_failures = Counter(
            "ledgermem_log_reopen_failures", "Attempts to reopen the log that failed", registry=r
        )
        self.reopens = Counter(
            "ledgermem_log_reopens", "Times the log was reopened after a failed write", registry=r
        )
        self.writes_refused = Gauge(
            "ledgermem_writes_refused",
            "1 while writes are refused after a failed write",
            registry=r,
        )
        self.stream_traces_skipped = Counter(
            "ledgermem_stream_traces_skipped",
            "Stream traces not appended: this replica does not lead the tenant's partition",
            registry=r,
        )
        self.partition_leading = Gauge(
            "ledgermem_partition_leading",
            "1 while this replica leads the partition (shared store)",
            ["partition"],
            registry=r,
        )
        self.forwarded = Counter(
            "ledgermem_forwarded_requests",
            "Session calls sent to the partition's leader on another replica (streams/cluster/forwarding.py)"
            ", by outcome: answered (the leader's answer relayed), retried (a 421 or a refused "
            "connection, tried once more), rerouted (the partition's leader changed while the leader "
            "had not answered: sent to the new one), no_leader (503), unreachable (failed "
            "mid-request, 503)",
            ["outcome"],
            registry=r,
        )
        for outcome in FORWARD_OUTCOMES:
            self.forwarded.labels(outcome)
        for channel in CHANNELS:
            self.subscribers.labels(channel)
        # Records made durable per tenant since start: what a tenant's token sees (status.py).
        # A plain dict, not a labelled counter: the operator's exposition stays per log.
        self.tenant_appends: dict[str, int] = {}
        self.traces_skipped = 0  # stream traces a follower replica did not append (status.py)

    def stream_trace_skipped(self) -> None:
        self.stream_traces_skipped.inc()
        self.traces_skipped += 1

    # Called by the writer thread.
    def on_records(self, records: list[Record]) -> None:
        self.appends.inc(len(records))
        by_tenant = self.tenant_appends
        for record in records:
            if not record.is_control:
                by_tenant[record.tenant] = by_tenant.get(record.tenant, 0) + 1
        self.head.set(records[-1].seq)

    def on_fsync(self, seconds: float, lines: int) -> None:
        self.fsync.observe(seconds)
        self.records_per_fsync.observe(lines)

    # Called by the hub and the channels.
    def subscriber_added(self, channel: str) -> None:
        self.subscribers.labels(channel).inc()

    def subscriber_removed(self, channel: str) -> None:
        self.subscribers.labels(channel).dec()

    def served(self, channel: str, source: str, n: int) -> None:
        self.served_records.labels(channel, source).inc(n)

    def lag(self, channel: str, records: int) -> None:
        self.subscriber_lag.labels(channel).observe(records)

    def subscriber_counts(self) -> dict[str, int]:
        """Open subscribers by channel, read through the gauge's public `collect()`."""
        counts = dict.fromkeys(CHANNELS, 0)
        for metric in self.subscribers.collect():
            for sample in metric.samples:
                counts[sample.labels["channel"]] = int(sample.value)
        return counts

    def fsync_summary(self) -> dict[str, int | float | None]:
        count = sum_ = 0.0
        for metric in self.fsync.collect():
            for sample in metric.samples:
                if sample.name.endswith("_count"):
                    count = sample.value
                elif sample.name.endswith("_sum"):
                    sum_ = sample.value
        return {"count": int(count), "mean_ms": round(1000 * sum_ / count, 3) if count else None}

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
