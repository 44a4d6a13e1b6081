"""The demo's picture: how the log, its dirt, the cleaner and the erasures moved over a run.

A :class:`Timeline` samples ``compactor status`` figures while something runs (the demo calls
it after each micro-batch, after each cleaning pass and every second while it waits);
:func:`render` draws five panels sharing one time axis and writes them as a PNG and as an HTML
page that also lists the figures behind them:

1. consumer lag: the broker's end offsets minus the mirrored offsets;
2. log size: live Parquet bytes and records of the topic's log;
3. dirty ratio of each partition, against ``min.cleanable.dirty.ratio``;
4. cleaning passes: bytes each pass rewrote, against what Kafka's cleaner would recopy;
5. every erasure: seconds from its tombstone to the moment every target had erased the key,
   against ``max.compaction.lag.ms``; pending ones are drawn at their age so far.

matplotlib comes with the ``demo`` extra; without it :func:`render` raises an error that says
what to install.
"""

from __future__ import annotations

import base64
import io
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compactor.cleaner.maintenance import PassReport
from compactor.config import CompactorConfig
from compactor.erasure.ledger import Erasure
from compactor.ops.report import page_head, pyplot
from compactor.ops.status import BrokerEnds, collect_status


@dataclass(frozen=True)
class Sample:
    at_ms: int
    size_bytes: int
    records: int
    dirty_ratio: dict[int, float]  # partition -> ratio
    lag: int | None  # broker end offsets minus mirrored offsets; None without the broker


@dataclass(frozen=True)
class PassMark:
    at_ms: int
    partitions: int
    bytes_written: int
    kafka_model_bytes: int
    records_dropped: int


@dataclass
class Timeline:
    """Figures of one topic over a run, sampled from the lake by :meth:`sample`."""

    config: CompactorConfig
    topic: str
    clock: Callable[[], float] = time.time
    started_ms: int = 0
    samples: list[Sample] = field(default_factory=list)
    passes: list[PassMark] = field(default_factory=list)
    # The lag's end offsets, through one consumer kept for every sample.
    broker: BrokerEnds = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.started_ms:
            self.started_ms = int(self.clock() * 1000)
        self.broker = BrokerEnds(self.config)

    def sample(self) -> None:
        now = int(self.clock() * 1000)
        topics, broker_error = collect_status(self.config, now_ms=now, broker=self.broker)
        (status,) = [t for t in topics if t.topic == self.topic]
        self.samples.append(Sample(
            now, sum(p.size_bytes for p in status.partitions),
            sum(p.records for p in status.partitions),
            {p.partition: p.dirty_ratio for p in status.partitions},
            None if broker_error else sum(p.lag or 0 for p in status.partitions),
        ))

    def mark_pass(self, report: PassReport) -> None:
        stats = [o.result.stats for o in report.cleaned if o.result is not None]
        if stats:
            self.passes.append(PassMark(
                int(self.clock() * 1000), len(stats), sum(s.bytes_written for s in stats),
                sum(s.kafka_model_bytes for s in stats), sum(s.records_dropped for s in stats)))
        self.sample()


def _figure(plt: Any, timeline: Timeline, erasures: list[Erasure], now_ms: int) -> Any:
    t0 = timeline.started_ms
    tc = timeline.config.topic(timeline.topic)

    def secs(ms: int) -> float:
        return (ms - t0) / 1000

    fig, axes = plt.subplots(5, 1, figsize=(10, 13), sharex=True, constrained_layout=True)
    lag, size, dirt, passes, erase = axes
    fig.suptitle(f"topic '{timeline.topic}' over the run (seconds since start)")

    xs = [secs(s.at_ms) for s in timeline.samples]
    known = [(x, s.lag) for x, s in zip(xs, timeline.samples, strict=True) if s.lag is not None]
    lag.plot([x for x, _ in known], [v for _, v in known], color="tab:purple",
             drawstyle="steps-post", marker=".")
    lag.set_ylabel("consumer lag, offsets")
    lag.set_title("is the mirror keeping up? broker end offsets minus mirrored offsets")
    size.plot(xs, [s.size_bytes / 1e6 for s in timeline.samples], color="tab:blue",
              drawstyle="steps-post")
    size.set_ylabel("log size, MB")
    records = size.twinx()
    records.plot(xs, [s.records for s in timeline.samples], color="tab:gray", linestyle=":",
                 drawstyle="steps-post")
    records.set_ylabel("records (dotted)")
    size.set_title("log size: grows with the mirror, shrinks when the cleaner commits")

    partitions = sorted({p for s in timeline.samples for p in s.dirty_ratio})
    for p in partitions:
        dirt.plot(xs, [s.dirty_ratio.get(p, 0.0) for s in timeline.samples],
                  drawstyle="steps-post", label=f"partition {p}")
    dirt.axhline(tc.min_cleanable_dirty_ratio, color="black", linestyle="--", linewidth=1,
                 label=f"min.cleanable.dirty.ratio={tc.min_cleanable_dirty_ratio}")
    dirt.set_ylim(0, 1.05)
    dirt.set_ylabel("dirty ratio")
    dirt.legend(loc="upper left", fontsize="small")
    dirt.set_title("dirty ratio: cleanable bytes / log bytes, active segment excluded")

    px = [secs(m.at_ms) for m in timeline.passes]
    width = 0.6
    passes.bar([x - width / 2 for x in px], [m.kafka_model_bytes / 1e6 for m in timeline.passes],
               width=width, color="tab:gray", label="Kafka's cleaner would recopy")
    passes.bar([x + width / 2 for x in px], [m.bytes_written / 1e6 for m in timeline.passes],
               width=width, color="tab:green", label="this cleaner rewrote")
    passes.set_ylabel("MB per pass")
    passes.legend(loc="upper left", fontsize="small")
    passes.set_title(f"cleaning passes: {len(timeline.passes)}")

    deadline = None if tc.erasure_deadline_ms is None else tc.erasure_deadline_ms / 1000
    done = [e for e in erasures if e.done_ms is not None]
    pending = [e for e in erasures if e.done_ms is None]
    late = [e for e in erasures if e.late(now_ms)]
    erase.scatter([secs(e.tombstone_ms) for e in done],
                  [(e.done_ms - e.tombstone_ms) / 1000 for e in done if e.done_ms is not None],
                  s=8, color="tab:green", label=f"erased ({len(done)})")
    if pending:
        erase.scatter([secs(e.tombstone_ms) for e in pending],
                      [(now_ms - e.tombstone_ms) / 1000 for e in pending], s=8,
                      facecolors="none", edgecolors="tab:orange",
                      label=f"pending, age so far ({len(pending)})")
    if late:
        erase.scatter([secs(e.tombstone_ms) for e in late],
                      [((e.done_ms or now_ms) - e.tombstone_ms) / 1000 for e in late], s=14,
                      color="tab:red", label=f"past the deadline ({len(late)})")
    if deadline is not None:
        erase.axhline(deadline, color="tab:red", linestyle="--", linewidth=1,
                      label=f"deadline: max.compaction.lag.ms={tc.max_compaction_lag_ms}")
    erase.set_ylabel("tombstone to erased, s")
    erase.set_xlabel("seconds since the start (erasures at their tombstone's timestamp)")
    erase.legend(loc="upper left", fontsize="small")
    erase.set_title(f"erasures: {len(erasures)} tombstones, every target (log, table, "
                    "downstream) finished")
    return fig


def render(timeline: Timeline, erasures: list[Erasure], directory: Path,
           now_ms: int | None = None) -> tuple[Path, Path]:
    """Write ``<topic>.png`` and ``<topic>.html`` into ``directory``; returns their paths."""
    plt = pyplot()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    fig = _figure(plt, timeline, erasures, now)
    png = directory / f"{timeline.topic}.png"
    page = directory / f"{timeline.topic}.html"
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    png.write_bytes(buffer.getvalue())
    page.write_text(_page(timeline, erasures, now, base64.b64encode(buffer.getvalue())))
    return png, page


def _page(timeline: Timeline, erasures: list[Erasure], now_ms: int, image: bytes) -> str:
    tc = timeline.config.topic(timeline.topic)
    done = sorted((e.done_ms - e.tombstone_ms) / 1000 for e in erasures if e.done_ms is not None)

    def pct(q: float) -> str:  # nearest rank
        return f"{done[max(0, math.ceil(q * len(done)) - 1)]:.1f}s" if done else "-"

    last = timeline.samples[-1] if timeline.samples else None
    facts = [
        ("cleanup.policy", ",".join(sorted(tc.cleanup_policy))),
        ("max.compaction.lag.ms (erasure deadline)", str(tc.max_compaction_lag_ms)),
        ("delete.retention.ms", str(tc.delete_retention_ms)),
        ("log now", f"{last.records:,} records, {last.size_bytes / 1e6:.2f} MB" if last else "-"),
        ("cleaning passes", str(len(timeline.passes))),
        ("bytes rewritten / Kafka's model",
         f"{sum(m.bytes_written for m in timeline.passes) / 1e6:.2f} MB / "
         f"{sum(m.kafka_model_bytes for m in timeline.passes) / 1e6:.2f} MB"),
        ("erasures", f"{len(erasures)}: {len(done)} done, "
                     f"{len(erasures) - len(done)} pending, "
                     f"{sum(e.late(now_ms) for e in erasures)} past the deadline"),
        ("erasure latency p50 / p99 / max", f"{pct(0.5)} / {pct(0.99)} / "
                                             f"{f'{done[-1]:.1f}s' if done else '-'}"),
    ]
    passes = "\n".join(
        f"<tr><td>{(m.at_ms - timeline.started_ms) / 1000:.1f}</td><td>{m.partitions}</td>"
        f"<td>{m.records_dropped:,}</td><td>{m.bytes_written:,}</td>"
        f"<td>{m.kafka_model_bytes:,}</td></tr>" for m in timeline.passes)
    head = page_head(timeline.topic, facts,
                     "The panels share one time axis, in seconds since the run began.")
    return f"""{head}
<img alt="log size, dirty ratio, cleaning passes and erasures over the run"
 src="data:image/png;base64,{image.decode()}">
<h2>Cleaning passes</h2>
<table><tr><th>at, s</th><th>partitions</th><th>records dropped</th><th>bytes written</th>
<th>Kafka's cleaner would recopy, bytes</th></tr>
{passes}</table>
</body></html>
"""
