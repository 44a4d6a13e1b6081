"""The picture from figures alone: every panel's data lands in the PNG and the page."""

from __future__ import annotations

from compactor.demo.picture import PassMark, Sample, Timeline, render
from compactor.erasure.ledger import Erasure
from tests.lake import offline_config


def test_render_writes_png_and_page_with_the_figures(tmp_path) -> None:
    config = offline_config(str(tmp_path / "lake"), "users", cleanup_policy="compact",
                            max_compaction_lag_ms=40000)
    t0 = 1_000_000
    timeline = Timeline(config, "users", started_ms=t0)
    timeline.samples += [Sample(t0 + 1000 * i, 10_000 * i, 100 * i, {0: 0.1 * i, 1: 0.0},
                                None if i == 2 else 50 - i) for i in range(6)]
    timeline.passes.append(PassMark(t0 + 3000, 2, 4_000, 40_000, 321))
    erasures = [
        Erasure(0, 10, t0 + 500, t0 + 40_500, t0 + 20_500),   # on time
        Erasure(0, 11, t0 + 600, t0 + 40_600, t0 + 45_000),   # finished late
        Erasure(1, 12, t0 + 700, t0 + 40_700, None),          # still pending
    ]
    png, page = render(timeline, erasures, tmp_path, now_ms=t0 + 30_000)
    assert png.read_bytes()[:4] == b"\x89PNG"
    text = page.read_text()
    assert "<td>3: 2 done, 1 pending, 1 past the deadline</td>" in text
    assert "<td>20.0s / 44.4s / 44.4s</td>" in text  # p50 / p99 / max of the finished two
    assert "<td>321</td><td>4,000</td><td>40,000</td>" in text
    assert "max.compaction.lag.ms (erasure deadline)</th><td>40000" in text
