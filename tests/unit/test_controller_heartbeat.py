"""Liveness of the background controllers (controllers/health.py): when a loop is stale, when it is
ready, and the probe server's answers."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import pytest

from controllers.health import Heartbeat, serve


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_stale_only_after_the_window_of_periods() -> None:
    clock = Clock()
    beat = Heartbeat(period_s=20.0, stale_periods=3, min_window_s=30.0, clock=clock)
    assert beat.window_s == 60.0
    clock.now += 59.0
    assert beat.live()[0] is True  # start-up counts as a tick
    clock.now += 2.0
    alive, why = beat.live()
    assert alive is False and why.startswith("stale: started, no tick yet")
    beat.tick()
    assert beat.live() == (True, "ok: last tick 0.0s ago (1 ticks)")
    clock.now += 60.5
    assert beat.live()[0] is False


def test_a_short_period_still_gets_the_minimum_window() -> None:
    clock = Clock()
    beat = Heartbeat(period_s=2.0, clock=clock)
    beat.tick()
    clock.now += 29.0
    assert beat.window_s == 30.0 and beat.live()[0] is True


def test_ready_needs_a_tick_and_a_pass_that_worked() -> None:
    clock = Clock()
    beat = Heartbeat(period_s=5.0, clock=clock)
    assert beat.ready() == (False, "not ready: no pass yet")
    beat.tick(ok=False)
    assert beat.live()[0] is True  # a failed pass is still a live loop
    assert beat.ready() == (False, "not ready: the last pass failed")
    beat.tick(ok=True)
    assert beat.ready()[0] is True
    clock.now += 31.0
    assert beat.ready()[0] is False  # stale is never ready


@pytest.mark.parametrize("kwargs", [{"period_s": 0}, {"period_s": -1}, {"period_s": 5, "stale_periods": 0.5},
                                    {"period_s": 5, "min_window_s": -1}, {"period_s": float("nan")}])  # fmt: skip
def test_bad_settings_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="heartbeat needs period_s > 0"):
        Heartbeat(**kwargs)


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_the_probe_server_answers_from_the_heartbeat() -> None:
    clock = Clock()
    beat = Heartbeat(period_s=5.0, clock=clock)
    server = serve(beat, 0, host="127.0.0.1")
    try:
        port = server.server_address[1]
        assert _get(port, "/healthz")[0] == 200
        assert _get(port, "/readyz") == (503, "not ready: no pass yet\n")
        beat.tick()
        assert _get(port, "/readyz")[0] == 200
        clock.now += 31.0
        status, body = _get(port, "/healthz?verbose")
        assert status == 503 and body.startswith("stale: last tick 31.0s ago")
        assert _get(port, "/metrics")[0] == 404
    finally:
        server.shutdown()
        server.server_close()
