// Log health, polled: /v1/log/status for the head, the newest checkpoint, the verifier's verdict,
// subscribers per channel and the mean fsync; /metrics for the fsync latency distribution
// (ledgermem_fsync_seconds, a Prometheus histogram).

import { $, ago } from "./dom.js";
import { getJSON, getText } from "./api.js";

const EVERY_MS = 2000;

export class Health {
  constructor({ onStatus }) {
    this.onStatus = onStatus || (() => {});
    this.timer = null;
  }

  start() {
    const tick = async () => {
      await this.refresh();
      this.timer = setTimeout(tick, EVERY_MS);
    };
    tick();
  }

  async refresh() {
    try {
      const [status, metrics] = await Promise.all([
        getJSON("/v1/log/status"),
        getText("/metrics"),
      ]);
      this.show(status, parseHistogram(metrics, "ledgermem_fsync_seconds"));
      $("h-error").textContent = "";
      this.onStatus(status);
    } catch (error) {
      $("h-error").textContent = `service unreachable: ${error.message}`;
    }
  }

  show(status, fsync) {
    $("h-head").textContent = status.head;
    $("h-head").dataset.head = status.head;
    const cp = status.checkpoint;
    $("h-checkpoint").textContent = cp.size === null
      ? `none (${cp.error || "not written yet"})`
      : `${cp.size} records, ${ago(cp.age_seconds)} old`;
    const v = status.verifier;
    const verifier = $("h-verifier");
    verifier.dataset.state = v ? v.state : "off";
    verifier.textContent = !v ? "off"
      : v.state === "failed" ? `FAILED: ${v.error}`
      : `${v.state} · through seq ${v.verified_through} · checkpoint ${v.checkpoint_verified}`;
    $("h-subscribers").textContent = Object.entries(status.subscribers)
      .map(([channel, n]) => `${channel} ${n}`).join(" · ");
    const parts = [];
    if (status.fsync.mean_ms !== null) parts.push(`mean ${status.fsync.mean_ms} ms`);
    if (fsync.count) {
      parts.push(`p50 ≤ ${ms(quantile(fsync, 0.5))}`, `p99 ≤ ${ms(quantile(fsync, 0.99))}`);
    }
    parts.push(`${status.fsync.count} fsyncs`);
    $("h-fsync").textContent = parts.join(" · ");
  }
}

function ms(seconds) {
  return seconds === Infinity ? "> 500 ms" : `${+(seconds * 1000).toPrecision(3)} ms`;
}

// The cumulative buckets {le: count} of one unlabelled histogram, and its count.
export function parseHistogram(text, name) {
  const buckets = [];
  let count = 0;
  for (const line of text.split("\n")) {
    if (line.startsWith(`${name}_bucket{`)) {
      const match = line.match(/le="([^"]+)"\}\s+(\S+)/);
      if (match) buckets.push([match[1] === "+Inf" ? Infinity : +match[1], +match[2]]);
    } else if (line.startsWith(`${name}_count `)) {
      count = +line.split(/\s+/)[1];
    }
  }
  return { buckets, count };
}

// The upper bound of the bucket holding quantile q: what a histogram can honestly say.
function quantile({ buckets, count }, q) {
  for (const [le, cumulative] of buckets) if (cumulative >= q * count) return le;
  return Infinity;
}
