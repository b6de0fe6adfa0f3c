"""The site file's ``burst`` section: the lag SLO and the lag watch's window, with file:line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from settings import Settings, SettingsError, load_settings, parse_settings


def refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> str:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gpufabric.yaml").write_text(text)
    with pytest.raises(SettingsError) as caught:
        load_settings("gpufabric.yaml")
    return str(caught.value)


def test_defaults_are_the_issues_slo() -> None:
    burst = parse_settings("version: 1\n").burst
    assert (burst.lag_slo_s, burst.watch_s, burst.lookback_s) == (90.0, 45.0, 900.0)


def test_a_site_sets_its_own() -> None:
    settings: Settings = parse_settings("version: 1\nburst: {lag_slo_s: 30, watch_s: 120.5, lookback_s: 0}\n")
    assert (settings.burst.lag_slo_s, settings.burst.watch_s, settings.burst.lookback_s) == (30.0, 120.5, 0.0)


@pytest.mark.parametrize(
    ("snippet", "expected"),
    [
        ("burst:\n  lag_slo_s: 0\n", "gpufabric.yaml:3: burst.lag_slo_s: must be greater than 0"),
        ("burst:\n  lag_slo_s: -5\n", "gpufabric.yaml:3: burst.lag_slo_s: must be greater than 0"),
        ("burst:\n  watch_s: 100000\n", "gpufabric.yaml:3: burst.watch_s: must be at most 86400"),
        ("burst:\n  lookback_s: -1\n", "gpufabric.yaml:3: burst.lookback_s: must be at least 0"),
        ("burst:\n  lag_slo_s: .inf\n", "gpufabric.yaml:3: burst.lag_slo_s: must be a finite number"),
        ("burst:\n  lag_slo_s: soon\n", "gpufabric.yaml:3: burst.lag_slo_s: expected a number; got a string"),
        ("burst:\n  lag_slo: 90\n", "gpufabric.yaml:3: burst: unknown key 'lag_slo'; did you mean 'lag_slo_s'?"),
    ],
)
def test_bad_values_are_refused_with_the_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, snippet: str, expected: str
) -> None:
    message = refused(tmp_path, monkeypatch, "version: 1\n" + snippet)
    assert message == expected


@pytest.mark.parametrize(("env", "expected"), [("2", 2.0), ("0.5", 0.5), ("0", 45.0), ("-3", 45.0), ("soon", 45.0),
                                               ("inf", 45.0), ("", 45.0)])  # fmt: skip
def test_one_shot_runs_shorten_the_watch_through_the_environment(
    monkeypatch: pytest.MonkeyPatch, env: str, expected: float
) -> None:
    from assets.agents.burst_lag import ENV_WATCH_SECONDS, effective_watch_s

    monkeypatch.setenv(ENV_WATCH_SECONDS, env)
    assert effective_watch_s(parse_settings("version: 1\n")) == expected
