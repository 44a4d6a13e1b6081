"""Stopping a run: one signal after the commit, a second at once, even inside the first."""

from __future__ import annotations

import logging
import signal

import pytest

from streaming import stop_signals
from streaming.stop_signals import StopSignals


class Exited(Exception):
    pass


def _exit(code: int) -> None:
    raise Exited(code)


def test_a_signal_inside_the_first_ones_handler_stops_at_once(monkeypatch, capsys) -> None:
    stops = StopSignals()
    monkeypatch.setattr(stop_signals.os, "_exit", _exit)
    # SIGTERM's handler runs between two bytecodes of SIGINT's, here in the middle of its
    # log line: it must see that a signal came first.
    nested = []

    def warning(*_args: object) -> None:
        if not nested:
            nested.append(True)
            stops.request(signal.SIGTERM)

    monkeypatch.setattr(stop_signals.log, "warning", warning)
    with pytest.raises(Exited) as exited:
        stops.request(signal.SIGINT)
    assert exited.value.args == (130,)
    assert "second SIGTERM: stopping now" in capsys.readouterr().err


def test_one_signal_asks_for_a_stop_after_the_commit_and_a_second_stops_at_once(
        monkeypatch, caplog, capsys) -> None:
    stops = StopSignals()
    monkeypatch.setattr(stop_signals.os, "_exit", _exit)
    with caplog.at_level(logging.WARNING, logger=stop_signals.__name__):
        stops.request(signal.SIGTERM)
    assert stops.requested.is_set()
    assert "received SIGTERM: stopping after the current commit" in caplog.text
    with pytest.raises(Exited):
        stops.request(signal.SIGINT)
    assert "second SIGINT" in capsys.readouterr().err


def test_a_stop_asked_by_code_makes_the_next_signal_the_second(monkeypatch) -> None:
    stops = StopSignals()
    monkeypatch.setattr(stop_signals.os, "_exit", _exit)
    stops.request()
    assert stops.requested.is_set()
    with pytest.raises(Exited):
        stops.request(signal.SIGTERM)
