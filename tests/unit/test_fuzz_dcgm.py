"""DCGM telemetry under hostile input: exposition text (``core.telemetry.ExpositionParser``, as
``collect_exporters`` feeds it the scraped bytes), what of it the warehouse can hold
(``connectors.prometheus.storage.storable_samples``), Prometheus ``query_range`` answers
(``connectors.prometheus.api.matrix_result`` then ``parse_matrix``) and file_sd targets files.

Seeds: the real dcgm-exporter expositions in ../shared/fixtures/dcgm. test_dcgm_parser.py feeds
arbitrary short text and checks an upper bound; here real captures are damaged byte by byte and
the accounting is exact. The parser's contract (telemetry.py): bad lines are quarantined with
their line number and reason, a repeat of a series is counted (or quarantined when its value
differs). So every line with something on it that is not a comment is a sample, a counted
repeat, or a quarantined row; and storable_samples moves samples to quarantine, never drops one.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from connectors.prometheus.api import PrometheusError, matrix_result
from connectors.prometheus.scrape import TargetsError, read_targets_file
from connectors.prometheus.storage import DAY_MS, MAX_TS_MS, storable_samples
from core.telemetry import ExpositionParser, ParsedSamples, parse_matrix
from tests.unit.fuzz_inputs import JSON_VALUES, Mutated, mutated_bytes, storable

DCGM = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "dcgm"
TS = 1_796_205_600_000


@cache
def seeds() -> dict[str, bytes]:
    return {
        p.name: p.read_bytes()
        for p in [*sorted(DCGM.glob("*.prom")), DCGM / "sample-exposition-from-dcgm-exporter-repo.txt"]
    }


def check_exposition(text: str, parsed: ParsedSamples) -> None:
    lines = text.split("\n")
    content = [line for line in lines if line.strip() and not line.startswith("#")]
    blank_rejects = sum(1 for q in parsed.quarantined if isinstance(q.payload, str) and not q.payload.strip())
    accounted = len(parsed) + parsed.stats["duplicates"] + parsed.stats["mig_repeats"] + len(parsed.quarantined)
    # whitespace-only lines may be quarantined ("invalid metric name ''") or skipped; all else is exact
    assert accounted - blank_rejects == len(content), (accounted, blank_rejects, len(content))
    for q in parsed.quarantined:
        assert q.reason and q.location is not None and q.location.startswith(("line ", "series ")), q
        assert storable(q.reason), q.reason
    assert len(parsed.series_ids) == len(parsed.ts_ms) == len(parsed.values)
    assert set(parsed.series_ids) <= set(parsed.series)


def check_storable(parsed: ParsedSamples, around_ms: int | None) -> ParsedSamples:
    kept = storable_samples(parsed, around_ms=around_ms, device="node-a")
    # moved, never dropped
    assert len(kept) + len(kept.quarantined) == len(parsed) + len(parsed.quarantined)
    assert kept.stats["samples"] == parsed.stats["samples"] - (len(parsed) - len(kept))
    low, high = (0, MAX_TS_MS) if around_ms is None else (around_ms - DAY_MS, around_ms + DAY_MS)
    assert all(low <= ms <= high for ms in kept.ts_ms)
    for sid in set(kept.series_ids):
        s = kept.series[sid]
        texts = [s.metric, s.hostname, s.gpu_uuid, s.device, s.model_name, s.pci_bus_id, s.namespace, s.pod,
                 s.container, s.job, s.gpu_instance_profile, *s.labels, *s.labels.values()]  # fmt: skip
        assert all(storable(t) for t in texts), s
    for q in kept.quarantined[len(parsed.quarantined) :]:
        assert q.device == "node-a" and q.reason.startswith(("series label holds ", "sample timestamp ")), q
    return kept


@st.composite
def _damaged(draw: st.DrawFn) -> Mutated:
    return draw(mutated_bytes(seeds()[draw(st.sampled_from(sorted(seeds())))]))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_damaged())
@example(Mutated(b'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1",Hostname="n\x001"} 1410\n', ["NUL in a label"]))
@example(Mutated(b'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1"} 1410 99999999999999999999\n', ["year 10^9 timestamp"]))
@example(Mutated(b'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1"} 1410 1\n', ["1970 timestamp beside today"]))
def test_damaged_expositions(mutated: Mutated) -> None:
    parser = ExpositionParser()
    parsed = parser.parse(mutated.data, TS, device="node-a")
    try:
        text = mutated.data.decode("utf-8")
    except UnicodeDecodeError:
        (q,) = parsed.quarantined
        assert len(parsed) == 0 and q.reason.startswith("exposition is not UTF-8: ")
        return
    check_exposition(text, parsed)
    check_storable(parsed, around_ms=TS)
    check_storable(parsed, around_ms=None)
    # the second scrape of a target takes the cached fast path: the same answer, line for line
    again = parser.parse(mutated.data, TS, device="node-a")
    assert (again.series_ids, again.values) == (parsed.series_ids, parsed.values)
    assert [q.reason for q in again.quarantined] == [q.reason for q in parsed.quarantined]


_NAMES = st.sampled_from(["DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "up", "9bad", "", "a:b", "é"])
_LABELS = st.sampled_from(["gpu", "UUID", "Hostname", "GPU_I_ID", "GPU_I_PROFILE", "pod", "exported_pod", "x", "1a"])
_LABEL_VALUES = st.sampled_from(["0", "1", "-1", "zero", "", "GPU-1", '\\"', "\\n", "\\\\", "a\x00b", "99" * 30])
_VALUES = st.sampled_from(["1", "1410", "NaN", "+Inf", "-Inf", "9223372036854775794", "2147483634", "1e999",
                           "1_000", "0x10", "hot", "", "1 2 3", "140737488355328.000000"])  # fmt: skip
_STAMPS = st.sampled_from(["", " 1796205600000", " 1", " -1", " 99999999999999999999", " 1.5", " x"])


@st.composite
def _exposition_line(draw: st.DrawFn) -> str:
    labels = draw(st.lists(st.tuples(_LABELS, _LABEL_VALUES), max_size=4))
    block = ",".join(f'{k}="{v}"' for k, v in labels)
    brace = draw(st.sampled_from(["{%s}", "{%s", "%s}", "{%s,}", "", "{ %s }"]))
    return f"{draw(_NAMES)}{brace % block if '%s' in brace else brace} {draw(_VALUES)}{draw(_STAMPS)}"


@settings(max_examples=300, deadline=None)
@given(st.lists(_exposition_line() | st.sampled_from(["", "# HELP x", " ", "\t", "\r"]), max_size=15))
def test_generated_expositions(lines: list[str]) -> None:
    text = "\n".join(lines)
    parsed = ExpositionParser().parse(text.encode(), TS, device="node-a")
    check_exposition(text, parsed)
    check_storable(parsed, around_ms=TS)


def test_one_endless_line() -> None:
    for line in ("A" * 1_000_000, '{a="' * 200_000, "m{" + 'a="1",' * 100_000 + "} 1", "m " + "1" * 1_000_000):
        parsed = ExpositionParser().parse((line + "\n").encode(), TS, device="node-a")
        check_exposition(line + "\n", parsed)


# --- Prometheus query_range answers -----------------------------------------------------------------

_SAMPLE = st.one_of(
    st.tuples(st.floats(1.7e9, 1.8e9) | st.integers(0, 2**40), st.sampled_from(["1", "NaN", "x", "1e999"])).map(list),
    JSON_VALUES,
)
_SERIES = st.fixed_dictionaries(
    {"metric": st.dictionaries(st.sampled_from(["__name__", "gpu", "UUID", "Hostname"]),
                               st.sampled_from(["DCGM_FI_DEV_SM_CLOCK", "0", "GPU-1", "a\x00"]), max_size=4)
               | JSON_VALUES,
     "values": st.lists(_SAMPLE, max_size=4) | JSON_VALUES},
)  # fmt: skip
_ANSWERS = st.one_of(
    st.builds(lambda r: {"status": "success", "data": {"resultType": "matrix", "result": r}},
              st.lists(_SERIES | JSON_VALUES, max_size=4)),
    st.builds(lambda d: {"status": "success", "data": d}, JSON_VALUES),
    JSON_VALUES,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(_ANSWERS)
@example(
    {
        "status": "success",
        "data": {"resultType": "matrix", "result": [{"metric": {"__name__": "x"}, "values": [["1e400", "1"]]}]},
    }
)
@example({"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {"__name__": 5}, "values": []}]}})
@example({"status": "success", "data": [1]})
def test_query_range_answers(answer: Any) -> None:
    # was: OverflowError ("1e400" seconds), TypeError (a metric name that is a number), AttributeError
    try:
        result = matrix_result(answer, "http://prom")
    except PrometheusError as err:
        assert str(err).startswith("http://prom: "), err
        return
    parsed = parse_matrix(result, device="prom")
    # every sample landed, was counted as a repeat, or was quarantined; a series that could not be
    # read at all (no __name__, a label that must be a number and is not) is one row for all of it
    sample_level = ("sample is not [time, value]", "series repeated at one timestamp")
    whole = {q.location for q in parsed.quarantined if not q.reason.startswith(sample_level)}
    expected = sum(1 if f"result[{i}]" in whole else len(item.get("values") or []) for i, item in enumerate(result))
    accounted = len(parsed) + parsed.stats["duplicates"] + parsed.stats["mig_repeats"] + len(parsed.quarantined)
    assert accounted == expected, (accounted, expected)
    check_storable(parsed, around_ms=None)


# --- file_sd targets files ----------------------------------------------------------------------------

_GROUPS = st.lists(
    st.fixed_dictionaries({"targets": st.lists(st.sampled_from(["n1:9400", "", "[::1]:9400"]) | JSON_VALUES,
                                               max_size=3) | JSON_VALUES},
                          optional={"labels": st.dictionaries(st.sampled_from(["__scheme__", "__metrics_path__", "x"]),
                                                              JSON_VALUES, max_size=2) | JSON_VALUES})
    | JSON_VALUES,
    max_size=3,
)  # fmt: skip


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_GROUPS | JSON_VALUES, st.sampled_from([".json", ".yaml"]))
@example([{"targets": ["n1:9400"], "labels": ["x"]}], ".json")  # was: AttributeError on labels.get
def test_targets_files(tmp_path: Path, groups: Any, suffix: str) -> None:
    path = tmp_path / f"targets{suffix}"
    path.write_text(json.dumps(groups))  # JSON is YAML too
    try:
        urls = read_targets_file(path)
    except TargetsError as err:
        assert str(err).startswith(str(path)), err
        return
    assert isinstance(groups, list) and all(isinstance(u, str) and "://" in u for u in urls)
    assert len(urls) == sum(len(g["targets"]) for g in groups)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\xff\xfe[]", "not UTF-8 text (byte 0)"),
        (b"[" * 100_000 + b"]" * 100_000, "not valid JSON: maximum recursion depth exceeded"),
    ],
)
def test_unreadable_targets_files(tmp_path: Path, data: bytes, reason: str) -> None:
    # was: UnicodeDecodeError and RecursionError out of read_targets_file
    path = tmp_path / "targets.json"
    path.write_bytes(data)
    with pytest.raises(TargetsError, match="^" + re.escape(f"{path}: {reason}")):
        read_targets_file(path)
