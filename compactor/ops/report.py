"""``compactor report``: the operator's three questions over days, from the lake's history.

Per topic, over a window (``--since 24h``): is the mirror keeping up (how old the newest record
was when its micro-batch committed, and records a minute), is compaction on time (the largest
compaction delay under ``max.compaction.lag.ms`` each minute, records the cleaner dropped), and
are erasures inside their deadlines (every tombstone of the window: from its timestamp to the
moment every target had erased the key, against its deadline). The minutes come from
``L/T/history`` (:mod:`compactor.ops.history`), the erasures from the erasure ledger; the
broker is not needed. Written as a PNG and an HTML page per topic.
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compactor.config import CompactorConfig
from compactor.erasure.ledger import Erasure, ErasureLedger
from compactor.exceptions import CompactorError, ConfigError
from compactor.ops.history import Minute, read_history

_UNITS = {"s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_since(text: str) -> int:
    """``90m``, ``24h``, ``7d``, ``3600s`` as milliseconds."""
    match = re.fullmatch(r"\s*(\d+)\s*([smhd])\s*", text)
    if match is None or int(match.group(1)) == 0:
        raise ConfigError("--since", text, "must be a positive whole number with a unit: s, m, "
                          "h or d (for example 24h)")
    return int(match.group(1)) * _UNITS[match.group(2)]


def pyplot() -> Any:
    """matplotlib's pyplot drawing to files, or an error that says what to install."""
    try:
        import matplotlib
    except ImportError as exc:
        raise CompactorError(
            "the picture needs matplotlib, which is not installed: "
            "pip install 'kafka-lake-compactor[demo]'"
        ) from exc
    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    return plt


@dataclass
class TopicReport:
    """What the report shows of one topic."""

    topic: str
    since_ms: int
    now_ms: int
    max_compaction_lag_ms: int | None  # None: the topic sets no erasure deadline
    minutes: list[Minute] = field(default_factory=list)
    erasures: list[Erasure] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The figures behind the picture (``--json``)."""
        delays = sorted(m.mirrorDelayMs for m in self.minutes if m.mirrorDelayMs is not None)
        done = sorted(e.done_ms - e.tombstone_ms for e in self.erasures
                      if e.done_ms is not None)
        return {
            "topic": self.topic, "since_ms": self.since_ms, "now_ms": self.now_ms,
            "minutes": len({m.minuteMs for m in self.minutes}),  # two runs may share one
            "batches": sum(m.batches for m in self.minutes),
            "records": sum(m.records for m in self.minutes),
            "rejected": sum(m.rejected for m in self.minutes),
            "mirror_delay_ms": {"p50": _rank(delays, 0.5), "max": delays[-1] if delays else None},
            "passes": sum(m.passes for m in self.minutes),
            "records_dropped": sum(m.recordsDropped for m in self.minutes),
            "max_compaction_delay_ms": max((m.maxCompactionDelayMs or 0 for m in self.minutes),
                                           default=0),
            "max_compaction_lag_ms": self.max_compaction_lag_ms,
            "erasures": len(self.erasures),
            "erasures_pending": sum(1 for e in self.erasures if e.done_ms is None),
            "erasures_late": sum(1 for e in self.erasures if e.late(self.now_ms)),
            "erasure_ms": {"p50": _rank(done, 0.5), "p99": _rank(done, 0.99),
                           "max": done[-1] if done else None},
        }


def _rank(values: list[int], q: float) -> int | None:
    return values[max(0, math.ceil(q * len(values)) - 1)] if values else None


def collect(config: CompactorConfig, topic: str, since_ms: int,
            now_ms: int | None = None) -> TopicReport:
    """The topic's minutes and erasures since ``since_ms``."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    tc = config.topic(topic)
    lag = tc.max_compaction_lag_ms if tc.erasure_deadline_ms is not None else None
    erasures = [e for e in ErasureLedger(config).erasures(topic) if e.tombstone_ms >= since_ms]
    return TopicReport(topic, since_ms, now, lag, read_history(config, topic, since_ms),
                       erasures)


def _figure(plt: Any, r: TopicReport) -> Any:
    def hours(ms: int) -> float:
        return (ms - r.since_ms) / 3_600_000

    fig, (keep, compact, erase) = plt.subplots(3, 1, figsize=(11, 10), sharex=True,
                                              constrained_layout=True)
    fig.suptitle(f"topic '{r.topic}': hours since {_utc(r.since_ms)}")
    xs = [hours(m.minuteMs) for m in r.minutes]
    dated = [(x, m.mirrorDelayMs / 1000) for x, m in zip(xs, r.minutes, strict=True)
             if m.mirrorDelayMs is not None]
    keep.plot([x for x, _ in dated], [v for _, v in dated], ".", color="tab:purple",
              markersize=3, label="newest record's age at its commit, s")
    keep.set_ylabel("mirror delay, s")
    rate = keep.twinx()
    rate.plot(xs, [m.records for m in r.minutes], color="tab:gray", linewidth=0.6)
    rate.set_ylabel("records a minute (grey)")
    keep.set_title("is the mirror keeping up?")
    cx = [(x, m.maxCompactionDelayMs / 1000) for x, m in zip(xs, r.minutes, strict=True)
          if m.maxCompactionDelayMs is not None]
    compact.plot([x for x, _ in cx], [v for _, v in cx], ".", color="tab:blue", markersize=3,
                 label="largest compaction delay of the minute's passes")
    if r.max_compaction_lag_ms is not None:
        compact.axhline(r.max_compaction_lag_ms / 1000, color="tab:red", linestyle="--",
                        linewidth=1, label=f"max.compaction.lag.ms={r.max_compaction_lag_ms}")
    compact.set_ylabel("compaction delay, s")
    compact.legend(loc="upper left", fontsize="small")
    dropped = compact.twinx()
    width = max(1 / 60, (r.now_ms - r.since_ms) / 3_600_000 / 400)  # visible at any window
    dropped.bar(xs, [m.recordsDropped for m in r.minutes], width=width, color="tab:green",
                alpha=0.5)
    dropped.set_ylabel("records dropped (green)")
    compact.set_title("is compaction on time?")
    done = [e for e in r.erasures if e.done_ms is not None]
    erase.scatter([hours(e.tombstone_ms) for e in done],
                  [((e.done_ms or 0) - e.tombstone_ms) / 1000 for e in done], s=6,
                  color="tab:green", label=f"erased ({len(done)})")
    pending = [e for e in r.erasures if e.done_ms is None]
    if pending:
        erase.scatter([hours(e.tombstone_ms) for e in pending],
                      [(r.now_ms - e.tombstone_ms) / 1000 for e in pending], s=6,
                      facecolors="none", edgecolors="tab:orange",
                      label=f"pending, age so far ({len(pending)})")
    late = [e for e in r.erasures if e.late(r.now_ms)]
    if late:
        erase.scatter([hours(e.tombstone_ms) for e in late],
                      [((e.done_ms or r.now_ms) - e.tombstone_ms) / 1000 for e in late], s=12,
                      color="tab:red", label=f"past the deadline ({len(late)})")
    if r.max_compaction_lag_ms is not None:
        erase.axhline(r.max_compaction_lag_ms / 1000, color="tab:red", linestyle="--",
                      linewidth=1, label="deadline")
    erase.set_ylabel("tombstone to erased, s")
    erase.set_xlabel("hours (erasures at their tombstone's timestamp)")
    erase.legend(loc="upper left", fontsize="small")
    erase.set_title(f"are erasures inside their deadlines? {len(r.erasures)} tombstones")
    erase.set_xlim(0, hours(r.now_ms))  # the whole window, idle stretches included
    return fig


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ms / 1000))


def render(r: TopicReport, directory: Path) -> tuple[Path, Path]:
    """Write ``<topic>-report.png`` and ``<topic>-report.html``; returns their paths."""
    plt = pyplot()
    fig = _figure(plt, r)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    plt.close(fig)
    directory.mkdir(parents=True, exist_ok=True)
    png = directory / f"{r.topic}-report.png"
    page = directory / f"{r.topic}-report.html"
    png.write_bytes(buffer.getvalue())
    page.write_text(_page(r, base64.b64encode(buffer.getvalue()).decode()))
    return png, page


def page_head(topic: str, facts: list[tuple[str, str]], note: str = "") -> str:
    """An HTML page's start, up to its table of ``facts``, for the report and the demo."""
    rows = "\n".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
                     for k, v in facts)
    title = html.escape(f"kafka-lake-compactor: topic {topic}")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;max-width:64em;margin:2em auto}}
table{{border-collapse:collapse;margin:1em 0}}th,td{{border:1px solid #ccc;padding:.2em .6em;
text-align:left}}img{{max-width:100%}}</style></head><body>
<h1>{title}</h1>
<p>Is the mirror keeping up, is compaction on time, are erasures inside their deadlines?
{html.escape(note)}</p>
<table>{rows}</table>"""


def _page(r: TopicReport, image: str) -> str:
    s = r.summary()

    def ms(value: int | None) -> str:
        return "-" if value is None else f"{value / 1000:.1f} s"

    facts = [
        ("window", f"{_utc(r.since_ms)} to {_utc(r.now_ms)} ({s['minutes']} minutes recorded)"),
        ("mirrored", f"{s['records']:,} records in {s['batches']:,} micro-batches, "
                     f"{s['rejected']:,} rejected"),
        ("mirror delay p50 / max", f"{ms(s['mirror_delay_ms']['p50'])} / "
                                   f"{ms(s['mirror_delay_ms']['max'])}"),
        ("cleaning", f"{s['passes']:,} passes, {s['records_dropped']:,} records dropped, "
                     f"largest compaction delay {ms(s['max_compaction_delay_ms'])}"),
        ("max.compaction.lag.ms", "none (no erasure deadline)" if r.max_compaction_lag_ms is None
         else str(r.max_compaction_lag_ms)),
        ("erasures", f"{s['erasures']:,}: {s['erasures_pending']:,} pending, "
                     f"{s['erasures_late']:,} past the deadline"),
        ("erasure p50 / p99 / max", f"{ms(s['erasure_ms']['p50'])} / "
                                    f"{ms(s['erasure_ms']['p99'])} / {ms(s['erasure_ms']['max'])}"),
    ]
    return f"""{page_head(r.topic, facts)}
<img alt="mirror delay, compaction delay and erasures over the window"
 src="data:image/png;base64,{image}">
</body></html>
"""
