"""The exposition parser on every real dcgm-exporter capture in ../shared/fixtures/dcgm, and on the
broken input it must quarantine rather than crash on or drop."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.quality import CollectionStatus
from core.telemetry import (
    ExpositionParser,
    LabelError,
    blank_code,
    is_device_level,
    make_series,
    parse_label_block,
    parse_matrix,
    parse_value,
)

FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "dcgm"
TS = 1_796_205_600_000


def _parse(name: str) -> tuple[ExpositionParser, object]:
    parser = ExpositionParser()
    return parser, parser.parse((FIXTURES / name).read_text(), TS, device=name)


def _by_metric(parsed: object) -> dict[str, list[tuple[object, float | None]]]:
    out: dict[str, list[tuple[object, float | None]]] = {}
    for sid, value in zip(parsed.series_ids, parsed.values, strict=True):  # type: ignore[attr-defined]
        s = parsed.series[sid]  # type: ignore[attr-defined]
        out.setdefault(s.metric, []).append((s, value))
    return out


def test_k8s_gpu_operator_capture() -> None:
    _, parsed = _parse("sample-exposition-k8s-rtx4000ada-gpu-operator-v25.10.prom")
    assert len(parsed) == 25 and not parsed.quarantined
    metrics = _by_metric(parsed)
    (clock, value), = metrics["DCGM_FI_DEV_SM_CLOCK"]
    assert value == 2310.0
    assert clock.hostname == "lke529760-766837-0a634ab30000"  # old capitalised Hostname
    assert clock.gpu_uuid == "GPU-a8394b51-c086-568a-9f1a-c1e1c934c44c"
    assert clock.pci_bus_id == "00000000:00:02.0"
    assert clock.model_name == "NVIDIA RTX 4000 Ada Generation"
    assert (clock.namespace, clock.pod, clock.container) == ("default", "cuda-75454ffb9f-8ljq7", "cuda")
    assert clock.labels == {"DCGM_FI_DRIVER_VERSION": "580.95.05"}  # pod_uid="" is absent
    assert metrics["DCGM_FI_DEV_POWER_USAGE"][0][1] == 40.979
    assert metrics["DCGM_FI_PROF_GR_ENGINE_ACTIVE"][0][1] == 0.004656
    assert metrics["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"][0][1] == 455497156.0
    xid, _ = metrics["DCGM_FI_DEV_XID_ERRORS"][0]
    assert xid.labels["err_code"] == "0" and xid.labels["err_msg"] == "No Error"
    assert all(ts == TS for ts in parsed.ts_ms)


def test_mig_capture_collapses_device_fields_per_gpu() -> None:
    _, parsed = _parse("sample-exposition-mig-a800-thirdparty.prom")
    assert not parsed.quarantined
    assert parsed.stats["mig_repeats"] == 3  # SM clock x2 and power x1 repeated on other instances
    metrics = _by_metric(parsed)
    clocks = sorted((s.gpu, s.gpu_instance_id, v) for s, v in metrics["DCGM_FI_DEV_SM_CLOCK"])
    assert clocks == [(0, None, 1410.0), (1, None, 210.0)]
    (power, value), = metrics["DCGM_FI_DEV_POWER_USAGE"]
    assert (power.gpu, power.gpu_instance_id, power.gpu_instance_profile, value) == (0, None, None, 78.174)
    tensor = sorted(
        (s.gpu_instance_id, s.gpu_instance_profile, v) for s, v in metrics["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"]
    )
    assert tensor == [(3, "2g.20gb", 0.0), (5, "2g.20gb", 0.0)]
    assert {s.hostname for s, _ in metrics["DCGM_FI_DEV_SM_CLOCK"]} == {"msxf-hpc-64-35-ai"}
    assert power.labels["DCGM_FI_PROCESS_NAME"] == "/usr/bin/dcgm-exporter"


def test_princeton_mig_line_with_job_labels() -> None:
    _, parsed = _parse("princeton-della-mig-line-thirdparty.prom")
    (s, value), = _by_metric(parsed)["DCGM_FI_DEV_FB_USED"]
    assert value == 8543.0
    assert (s.gpu_instance_profile, s.gpu_instance_id, s.hostname, s.job) == ("1g.10gb", 7, "della-l01g1", "51234567")
    assert s.labels["userid"] == "123456"


def test_readme_and_go_test_lines() -> None:
    _, parsed = _parse("sample-exposition-from-dcgm-exporter-repo.txt")
    assert not parsed.quarantined
    # The README shows each line with and without empty pod labels: empty labels are absent
    # labels, so those are the same series (counted, not stored twice).
    assert parsed.stats["duplicates"] == 3
    metrics = _by_metric(parsed)
    (_, value), = metrics["DCGM_FI_DEV_MEMORY_TEMP"]
    assert value is None  # 9223372036854775794 = DCGM_INT64_NOT_SUPPORTED
    assert parsed.stats["not_supported"] == 2
    tests = metrics["TEST_METRIC"]
    assert len(tests) == 6 and {v for _, v in tests} == {42.0}
    assert {s.hostname for s, _ in tests} == {"testhost"}  # lowercase hostname (dcgm-exporter #655)
    nvlink = next(s for s, _ in tests if "nvlink" in s.labels)
    assert nvlink.gpu_uuid == "GPU-test-uuid-0000-0000-0000-000000000000" and nvlink.model_name == "Test GPU Model"
    assert len({s.series_id for s, _ in tests}) == 6  # GPU, NVSwitch, NVLink, CPU, core: distinct entities


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.prom")))
def test_every_capture_parses_without_loss(name: str) -> None:
    text = (FIXTURES / name).read_text()
    _, parsed = _parse(name)
    sample_lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    counted = len(parsed) + parsed.stats["duplicates"] + parsed.stats["mig_repeats"] + len(parsed.quarantined)
    assert counted == len(sample_lines)
    assert not parsed.quarantined
    assert len(set(zip(parsed.series_ids, parsed.ts_ms, strict=True))) == len(parsed)


def test_malformed_lines_are_quarantined_with_reason() -> None:
    text = "\n".join([
        'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1"} 1410',
        'DCGM_FI_DEV_SM_CLOCK{gpu="1",UUID="GPU-2" 1410',
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} hot',
        "DCGM_FI_DEV_POWER_USAGE",
        'DCGM_FI_DEV_MEM_CLOCK{gpu="zero"} 5',
        'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-1",gpu="1"} 5',
        'DCGM_FI_DEV_FB_FREE{gpu="0" UUID="GPU-1"} 5',
        '9bad{gpu="0"} 1',
        'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1"} 1500',
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1"} 40 12 13',
    ])
    parsed = ExpositionParser().parse(text, TS, device="node-a")
    assert len(parsed) == 1 and parsed.status is CollectionStatus.PARTIAL
    reasons = [(q.location, q.reason) for q in parsed.quarantined]
    assert reasons == [
        ("line 2", "label block not closed ('{' without '}')"),
        ("line 3", "'hot' is not 'value [timestamp]'"),
        ("line 4", "line has a metric name but no value"),
        ("line 5", "label gpu='zero' is not an integer"),
        ("line 6", "label gpu given twice"),
        ("line 7", "malformed label block near 'gpu=\"0\" UUID=\"GPU-1\"'"),
        ("line 8", "invalid metric name '9bad'"),
        ("line 9", "series repeated in one exposition with a different value (kept 1410.0, got 1500.0)"),
        ("line 10", "'40 12 13' is not 'value [timestamp]'"),
    ]
    assert all(q.device == "node-a" and q.source == "dcgm" for q in parsed.quarantined)


def test_not_utf8_is_quarantined_whole() -> None:
    parsed = ExpositionParser().parse(b"DCGM_FI_DEV_SM_CLOCK{gpu=\"0\"} 1\xff\n", TS)
    assert len(parsed) == 0 and parsed.status is CollectionStatus.INVALID
    assert "not UTF-8" in parsed.quarantined[0].reason


def test_explicit_timestamps_escapes_and_no_labels() -> None:
    text = (
        'up 1\n'
        'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1",note="a\\"b\\\\c\\nd",} 1410 1796205600000\n'
        'DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1",note="a\\"b\\\\c\\nd",} 1420 1796205615000\n'
    )
    parsed = ExpositionParser().parse(text, TS + 30_000)
    assert parsed.values == [1.0, 1410.0, 1420.0]
    assert parsed.ts_ms == [TS + 30_000, 1796205600000, 1796205615000]
    clock = parsed.series[parsed.series_ids[1]]
    assert clock.labels["note"] == 'a"b\\c\nd'


@pytest.mark.parametrize(
    ("text", "value", "why"),
    [
        ("NaN", None, "nan"),
        ("+Inf", None, "non_finite"),
        ("-Inf", None, "non_finite"),
        ("9223372036854775792", None, "blank"),
        ("9223372036854775794", None, "not_supported"),
        ("9223372036854775795", None, "not_permissioned"),
        ("2147483632", None, "blank"),
        ("2147483634", None, "not_supported"),
        ("140737488355328.000000", None, "blank"),
        ("140737488355328", 140737488355328.0, None),  # an integer counter that large is real
        ("2147483631", 2147483631.0, None),
        ("2147483636", 2147483636.0, None),
        ("1.5e3", 1500.0, None),
        ("0.000000", 0.0, None),
    ],
)
def test_values_and_dcgm_sentinels(text: str, value: float | None, why: str | None) -> None:
    assert parse_value(text) == (value, why)


def test_blank_code_for_ordinary_values() -> None:
    assert blank_code("12", 12.0) is None


def test_label_aliases_and_exported_pod_labels() -> None:
    via_prometheus = make_series(
        "DCGM_FI_PROF_SM_ACTIVE",
        {"hostname": "n1", "gpu_uuid": "GPU-1", "gpu": "0", "model_name": "NVIDIA H100 80GB HBM3",
         "pod": "dcgm-exporter-x7", "namespace": "gpu-operator", "exported_pod": "train-0",
         "exported_namespace": "ml", "job": "dcgm", "instance": "10.0.0.1:9400"},
    )
    assert (via_prometheus.pod, via_prometheus.namespace, via_prometheus.hostname) == ("train-0", "ml", "n1")
    assert via_prometheus.labels["pod"] == "dcgm-exporter-x7"
    direct = make_series(
        "DCGM_FI_PROF_SM_ACTIVE",
        {"Hostname": "n1", "UUID": "GPU-1", "gpu": "0", "modelName": "NVIDIA H100 80GB HBM3", "pod": "train-0",
         "namespace": "ml"},
    )
    # the exporter's own pod, job and instance are attributes: the same GPU series either way
    assert direct.series_id == via_prometheus.series_id
    old = make_series("DCGM_FI_PROF_SM_ACTIVE", {"Hostname": "n1", "UUID": "GPU-1", "gpu": "0",
                                                 "pod_name": "train-0", "pod_namespace": "ml"})
    assert old.series_id == direct.series_id and old.pod == "train-0"
    assert make_series("dcgm_sm_clock", {"UUID": "GPU-1"}).metric == "DCGM_FI_DEV_SM_CLOCK"


def test_device_level_classification() -> None:
    assert is_device_level("DCGM_FI_DEV_SM_CLOCK")
    assert is_device_level("DCGM_FI_PROF_PCIE_TX_BYTES")
    assert not is_device_level("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
    assert not is_device_level("DCGM_FI_DEV_FB_USED")
    assert not is_device_level("gpufabric_workload_tokens_per_second")


def test_matrix_results() -> None:
    result = [
        {"metric": {"__name__": "DCGM_FI_DEV_SM_CLOCK", "Hostname": "n1", "UUID": "GPU-1", "gpu": "0",
                    "GPU_I_ID": "1", "GPU_I_PROFILE": "3g.40gb"},
         "values": [[1796205600, "1410"], [1796205601.5, "NaN"]]},
        {"metric": {"__name__": "DCGM_FI_DEV_SM_CLOCK", "Hostname": "n1", "UUID": "GPU-1", "gpu": "0",
                    "GPU_I_ID": "2", "GPU_I_PROFILE": "2g.20gb"},
         "values": [[1796205600, "1410"], [1796205601.5, "NaN"]]},
        {"metric": {"UUID": "GPU-1"}, "values": [[1, "1"]]},
        {"metric": {"__name__": "x", "gpu": "a"}, "values": [[1, "1"]]},
        {"metric": {"__name__": "x"}, "values": [[1, "one"]]},
    ]
    parsed = parse_matrix(result, device="prom")
    assert parsed.values == [1410.0, None]
    assert parsed.ts_ms == [1796205600000, 1796205601500]
    assert parsed.stats["mig_repeats"] == 2 and parsed.stats["nan"] == 2
    assert [q.reason for q in parsed.quarantined] == [
        "series without __name__", "label gpu='a' is not an integer", "sample is not [time, value]"]


def test_parse_label_block_errors() -> None:
    assert parse_label_block(' a="1" , b = "2",') == {"a": "1", "b": "2"}
    with pytest.raises(LabelError):
        parse_label_block('a="1",,b="2"')


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_arbitrary_text_never_crashes(text: str) -> None:
    parsed = ExpositionParser().parse(text, TS)
    assert len(parsed) + len(parsed.quarantined) + parsed.stats["duplicates"] + parsed.stats["mig_repeats"] <= len(
        text.split("\n")
    )


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True), st.text(max_size=20), max_size=6),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
)
def test_rendered_labels_roundtrip(labels: dict[str, str], value: float) -> None:
    escaped = ",".join(
        f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34)).replace(chr(10), chr(92) + "n")}"'
        for k, v in labels.items()
    )
    parsed = ExpositionParser().parse(f"m{{{escaped}}} {value!r}\n", TS)
    assert not parsed.quarantined
    assert parsed.values == [value if value < 2147483632 else parsed.values[0]]
    assert parse_label_block(escaped) == labels
