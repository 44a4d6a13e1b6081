"""``compactor demo`` as a newcomer runs it: its own broker, every check OK, the picture drawn."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_demo_passes_its_checks_and_draws_the_run(tmp_path) -> None:
    out = tmp_path / "demo"
    result = subprocess.run(
        [sys.executable, "-m", "compactor.cli", "demo", "--dir", str(out),
         "--users", "3000", "--updates", "30000"],
        capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # The terminal shows the story only: no log line of ours, Spark's or librdkafka's.
    assert result.stderr == ""
    log_line = re.compile(r" (DEBUG|INFO|WARN|WARNING|ERROR) |^%\d\|", re.MULTILINE)
    assert not log_line.search(result.stdout), result.stdout
    logs = (out / "demo.log").read_text()
    assert "INFO streaming.query: batch 0:" in logs and "Spark" in logs
    assert f"logs of Spark, the Kafka clients and the compactor: {out / 'demo.log'}" in (
        result.stdout)
    checks = re.findall(r"check: .*: (\S+)", result.stdout)
    assert len(checks) == 4 and set(checks) == {"OK"}, result.stdout
    # It ends with SQL over the typed table: Avro fields as columns, counted per country.
    assert "SQL on the typed table" in result.stdout
    counts = re.findall(r"^\s+([A-Z]{2})\s+([\d,]+)\s+([\d,]+)$", result.stdout, re.MULTILINE)
    live = int(re.search(r"one typed row per live user \(([\d,]+)\)", result.stdout)
               .group(1).replace(",", ""))
    assert len(counts) >= 5 and sum(int(n.replace(",", "")) for _, n, _ in counts) == live
    assert re.search(r"erasure ledger: \d+ tombstones, 0 still pending, 0 past", result.stdout)
    # The live phase reports the consumer lag while producers keep writing.
    assert re.search(r"\+\s*\d+s\s+consumer lag\s+\d+ offsets", result.stdout)

    png, page = out / "users.png", out / "users.html"
    assert f"picture of the run: {png}" in result.stdout and str(page) in result.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    html = page.read_text()
    assert 'src="data:image/png;base64,' in html
    tombstones = int(re.search(r"erasure ledger: (\d+) tombstones", result.stdout).group(1))
    assert f"<td>{tombstones}: {tombstones} done, 0 pending, 0 past the deadline</td>" in html

    # A second run replaces the demo's own directory, never a foreign one.
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("do not delete")
    again = subprocess.run([sys.executable, "-m", "compactor.cli", "demo", "--dir", str(foreign)],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "was not made by the demo" in again.stderr
    assert (foreign / "keep.txt").exists()
