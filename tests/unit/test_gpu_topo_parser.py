"""The ``nvidia-smi topo -m`` parser on every real capture in ../shared/fixtures/gpu-topo (each
compared with every fact its hand-written ``.expected.yaml`` lists), on variants built from them
(SOC, missing and extra columns, CRLF, ANSI codes, tabs vs spaces, Grace NUMA lists, old formats),
and on broken input, where it must name the reason."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from connectors.gpu_topo import MAX_BYTES, MAX_LINE, GpuTopoError, parse_file, parse_gpu_topo
from core.affinity import GPU_NUMA_ID, LOCAL_CLASSES, Connection, TopoMatrix
from tests.conftest import FIXTURES

FOLDER = FIXTURES / "gpu-topo"
CAPTURES = sorted(p for p in FOLDER.glob("*.txt") if p.name != "SOURCE.txt")
HGX = FOLDER / "hgx-h100-8nic-sglang30401.txt"
A100 = FOLDER / "a100-sxm4-10nic-legend-oyanghd.txt"


def expected(capture: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(capture.with_suffix(".expected.yaml").read_text())
    return data


def column(m: TopoMatrix, label: str) -> Any:
    return next(n for n in m.nics if n.label == label)


def test_every_capture_has_its_facts() -> None:
    assert len(CAPTURES) == 6  # SOURCE.txt lists six captures; a new one must get its .expected.yaml
    assert all(c.with_suffix(".expected.yaml").exists() for c in CAPTURES)


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.stem)
def test_capture_matches_its_expected_facts(capture: Path) -> None:
    exp = expected(capture)
    m = parse_file(capture)
    assert len(m.gpus) == exp["gpu_count"] and len(m.nics) == exp["nic_count"]
    assert {n.label: n.device for n in m.nics} == exp["nics"]
    fmt = exp["format"]
    assert list(m.columns) == fmt["trailing_columns"]
    assert m.legend is fmt["legend_block"] and m.nic_legend is fmt["nic_legend_block"]
    if fmt["nic_column_style"] == "NICn":
        assert all(re.fullmatch(r"NIC\d+", n.label) for n in m.nics)
    else:
        assert all(n.label == n.device for n in m.nics)
    for label, facts in exp["gpus"].items():
        g = next(g for g in m.gpus if g.label == label)
        assert g.numa_node == facts["numa_node"], label
        assert g.cpu_affinity == facts["cpu_affinity"], label
        if "gpu_numa_id" in facts:
            assert GPU_NUMA_ID in m.columns
            assert g.gpu_numa_id == (None if facts["gpu_numa_id"] == "N/A" else int(facts["gpu_numa_id"])), label
        else:
            assert GPU_NUMA_ID not in m.columns and g.gpu_numa_id is None
        cls, best = m.nearest_nics(g)
        assert cls == facts["best_nic_class"], label
        assert [n.label for n in best] == facts["best_nic_columns"], label
        assert [n.device for n in best] == facts["best_nics"], label
    pairs: dict[str, int] = {}
    for a, b in m.gpu_pairs():
        key = m.gpu_pair(a.index, b.index).label
        pairs[key] = pairs.get(key, 0) + 1
    assert pairs == exp["gpu_pairs"]
    for cls, names in exp.get("gpu_pair_detail", {}).items():
        for pair in names:
            a, b = pair.split("-")
            assert m.between(a, b).label == cls, pair
    counts = set(m.nvlink_counts().values())
    nv = re.fullmatch(r"NV(\d+) all pairs", exp["nvlink_summary"])
    assert counts == ({int(nv.group(1))} if nv else {0})
    for label, loc in exp["nic_locality"].items():
        cls, gpus = m.nearest_gpus(column(m, label))
        assert cls == loc["class"] and [g.label for g in gpus] == loc["gpus"], label
    check_anomalies(m, exp["anomalies"])


def check_anomalies(m: TopoMatrix, anomalies: list[dict[str, Any]]) -> None:
    """Each anomaly the yaml lists is what the parsed matrix says, and the kinds that are facts of
    the format (missing column or section, no NVLink, NICs without a local GPU) appear exactly
    when the matrix shows them."""
    kinds = {a["kind"] for a in anomalies}
    best = {g.label: m.nearest_nics(g) for g in m.gpus}
    assert ("missing_column" in kinds) is (GPU_NUMA_ID not in m.columns)
    assert ({"section": "Legend"} in [{"section": a.get("section")} for a in anomalies]) is (not m.legend)
    assert any(a.get("section") == "NIC Legend" for a in anomalies) is (not m.nic_legend)
    assert ("no_nvlink" in kinds) is (set(m.nvlink_counts().values()) == {0})
    lonely = [n.name for n in m.nics if m.nearest_gpus(n)[0] not in LOCAL_CLASSES]
    listed = [nic for a in anomalies if a["kind"] == "nic_without_local_gpu" for nic in a["nics"]]
    assert listed == lonely
    poor = sorted(g for g, (cls, _) in best.items() if cls in ("NODE", "SYS"))
    assert sorted(g for a in anomalies if a["kind"] == "poor_nic_affinity" for g in a["gpus"]) == poor
    for a in anomalies:
        if a["kind"] == "shared_nic":
            for g in a["gpus"]:
                cls, nics = best[g]
                assert cls == a["class"] and [n.name for n in nics] == a["nics"], a
        elif a["kind"] == "multiple_local_nics":
            for g in a.get("gpus", [a.get("gpu")]):
                assert len(best[g][1]) > 1 and best[g][0] in LOCAL_CLASSES, a
        elif a["kind"] == "fewer_local_nics_than_gpus":
            local = [n for n in m.nics if m.nearest_gpus(n)[0] in LOCAL_CLASSES]
            assert len(local) < len(m.gpus)


def comparable(m: TopoMatrix) -> dict[str, Any]:
    doc = m.to_json()
    doc.pop("notes")
    return doc


# --- variants ------------------------------------------------------------------------------------


def test_soc_is_read_as_sys_and_kept_raw() -> None:
    text = HGX.read_text()
    m = parse_gpu_topo(re.sub(r"\bSYS\b", "SOC", text))
    ref = parse_gpu_topo(text)
    assert m.between("GPU0", "NIC4") == Connection("SYS", 0, "SOC")
    assert [[c.label for c in row] for row in m.cells] == [[c.label for c in row] for row in ref.cells]
    assert any("SOC = SYS" in n for n in m.notes)


def drop_column(text: str, name: str) -> str:
    """The capture as a driver without that trailing column prints it (header and GPU rows)."""
    out = []
    for line in text.splitlines():
        if name in line:
            line = line.replace(name, "").rstrip()
        elif line.startswith("GPU"):
            line = re.sub(r"[ \t]+\S+$", "", line)
        out.append(line)
    return "\n".join(out) + "\n"


def test_missing_gpu_numa_id_column() -> None:
    m = parse_gpu_topo(drop_column(HGX.read_text(), "GPU NUMA ID"))
    assert m.columns == ("CPU Affinity", "NUMA Affinity")
    assert [g.numa_node for g in m.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert all(g.gpu_numa_id is None for g in m.gpus)


def test_only_cpu_affinity_column_as_old_drivers_print() -> None:
    text = drop_column(drop_column(HGX.read_text(), "GPU NUMA ID"), "NUMA Affinity")
    m = parse_gpu_topo(text)
    assert m.columns == ("CPU Affinity",)
    assert m.gpu(5).cpu_affinity == "48-95,144-191" and m.gpu(5).numa_node is None


def test_extra_trailing_column_is_kept() -> None:
    lines = A100.read_text().splitlines()
    lines[0] += "\tPCIe Gen"
    lines[1:9] = [f"{line}\tGen{4 + i % 2}" for i, line in enumerate(lines[1:9])]
    m = parse_gpu_topo("\n".join(lines) + "\n")
    assert m.columns == ("CPU Affinity", "NUMA Affinity", "PCIe Gen")
    assert m.gpu(0).extra == {"PCIe Gen": "Gen4"} and m.gpu(1).extra == {"PCIe Gen": "Gen5"}
    assert m.gpu(0).numa_node == 3


def test_crlf_ansi_and_tab_expansion_change_nothing() -> None:
    for capture in CAPTURES:
        text = capture.read_text()
        ref = comparable(parse_file(capture))
        assert comparable(parse_gpu_topo(text.replace("\n", "\r\n"))) == ref, capture.name
        assert comparable(parse_gpu_topo(text.expandtabs(8))) == ref, capture.name
        header, rest = text.split("\n", 1)
        assert comparable(parse_gpu_topo(f"\x1b[4m{header}\x1b[0m\n{rest}")) == ref, capture.name
        # a paste that lost the header's leading blank cell, and one with a label line before it
        assert comparable(parse_gpu_topo(header.strip() + "\n" + rest)) == ref, capture.name
        assert comparable(parse_gpu_topo("NVIDIA Topology:\n" + text + "\nulimit soft: 1048576\n")) == ref


def test_crlf_is_noted() -> None:
    m = parse_gpu_topo(HGX.read_text().replace("\n", "\r\n"))
    assert "CRLF line ends" in m.notes


def test_b300_header_ansi_remnants_are_noted() -> None:
    m = parse_file(FOLDER / "b300-9nic-ansi-header-sglang26039.txt")
    assert m.devices[0] == "GPU0" and m.columns[-1] == "GPU NUMA ID"
    assert any("ANSI" in n for n in m.notes)


GRACE = """\
        GPU0    GPU1    NIC0    NIC1    CPU Affinity    NUMA Affinity   GPU NUMA ID
GPU0     X      NV18    SYS     SYS     0-71    0,3-9,11-17             2
GPU1    NV18     X      SYS     SYS     0-71    0,3-9,11-17             10
NIC0    SYS     SYS      X      SYS
NIC1    SYS     SYS     SYS      X

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
"""


def test_grace_numa_lists_and_gpu_numa_ids() -> None:
    m = parse_gpu_topo(GRACE)
    g0, g1 = m.gpus
    assert g0.numa_affinity == "0,3-9,11-17" and g0.numa_node == 0
    assert g0.numa_nodes == (0, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15, 16, 17)
    assert (g0.gpu_numa_id, g1.gpu_numa_id) == (2, 10)
    assert not m.legend and m.nic_legend


OLD_SINGLE = (  # an old driver's Legend (SOC, no NODE), as a 2017 capture shows it
    "\tGPU0\tCPU Affinity\nGPU0\t X \t0-7\n\nLegend:\n\n  X   = Self\n"
    "  SOC  = Connection traversing PCIe as well as the SMP link between CPU sockets(e.g. QPI)\n"
)
OLD_FOUR = """\
\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity
GPU0\t X \tPHB\tSOC\tSOC\t0-9,20-29
GPU1\tPHB\t X \tSOC\tSOC\t0-9,20-29
GPU2\tSOC\tSOC\t X \tPHB\t10-19,30-39
GPU3\tSOC\tSOC\tPHB\t X \t10-19,30-39
"""


def test_old_driver_formats() -> None:
    single = parse_gpu_topo(OLD_SINGLE)
    assert single.devices == ("GPU0",) and single.gpu(0).cpu_affinity == "0-7" and single.legend
    four = parse_gpu_topo(OLD_FOUR)
    assert four.gpu_pair(0, 2).label == "SYS" and four.gpu_pair(0, 1).label == "PHB"
    assert four.nics == () and four.gpu(3).cpu_affinity == "10-19,30-39"
    assert four.nearest_nics(four.gpu(0)) == (None, ())


def test_round_trip_through_text_and_json() -> None:
    for capture in CAPTURES:
        m = parse_file(capture)
        assert comparable(parse_gpu_topo(m.to_text())) == comparable(m), capture.name
        assert TopoMatrix.from_json(m.to_json()) == m, capture.name


# --- broken input --------------------------------------------------------------------------------


def hgx_lines() -> list[str]:
    return HGX.read_text().split("\n")


def joined(lines: list[str]) -> str:
    return "\n".join(lines)


def set_cell(lines: list[str], row: int, col: int, token: str) -> list[str]:
    """Replace the ``col``-th cell (0-based, after the label) of matrix row ``row`` (1-based line)."""
    tokens = re.split(r"(\s+)", lines[row])
    tokens[2 + 2 * col] = token
    lines = list(lines)
    lines[row] = "".join(tokens)
    return lines


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no matrix header"),
        ("Legend:\n  X = Self\n", "no matrix header"),
        (joined(hgx_lines()[:10]), "matrix has 9 rows for the header's 16 devices"),
        (joined(hgx_lines()[:1] + hgx_lines()[2:]), r"line 2: row 'GPU1' where the header's order expects GPU0"),
        (joined(set_cell(hgx_lines(), 1, 2, "FOO")), r"GPU0/GPU2: 'FOO' is not a connection class"),
        (joined(set_cell(hgx_lines(), 1, 2, "NV0")), r"'NV0' is not a bonded set of NVLinks"),
        (joined(set_cell(hgx_lines(), 1, 8, "PXB")), r"asymmetric matrix: GPU0/NIC0 is PXB but NIC0/GPU0 is PIX"),
        (joined(set_cell(hgx_lines(), 1, 0, "PIX")), r"GPU0/GPU0 is not X"),
        (joined(set_cell(set_cell(hgx_lines(), 1, 1, "X"), 2, 0, "X")), r"GPU0/GPU1 is X off the diagonal"),
        (
            joined(set_cell(set_cell(hgx_lines(), 1, 8, "NV2"), 9, 0, "NV2")),
            r"GPU0/NIC0 is NV2: NVLink joins GPUs only",
        ),
        (HGX.read_text().replace("GPU3    GPU4", "GPU3    GPU3", 1), r"duplicate device GPU3 in the header"),
        (HGX.read_text().replace("NIC7: mlx5_7", "NIC7: mlx5_6"), r"duplicate device mlx5_6 \(NIC6 and NIC7\)"),
        (HGX.read_text().replace("  NIC7: mlx5_7\n", ""), r"the NIC Legend does not name NIC7 \(truncated\?\)"),
        (HGX.read_text() + "  NIC8: mlx5_8\n", r"the NIC Legend names NIC8, which the matrix does not have"),
        (HGX.read_text().replace("  NIC3: mlx5_3\n", "  NIC3: mlx5_3\n  NIC3: mlx5_9\n"), "NIC3 appears twice"),
        (HGX.read_text().replace("0-47,96-143", "0-47,96-x", 1), r"GPU0 CPU Affinity '0-47,96-x' is not a list"),
        (HGX.read_text().replace("0-47,96-143", "47-0", 1), r"runs backwards"),
        (HGX.read_text().replace("0-47,96-143     0 ", "0-47,96-143     0-99999 ", 1), r"lists over 1024 nodes"),
        (HGX.read_text().replace("N/A", "", 1), r"row GPU0 has 2 value\(s\) after the matrix for 3 column\(s\)"),
        (HGX.read_text().replace("NODE     X \n", "NODE     X  0-7\n", 1), r"NIC row NIC7 has values after the matrix"),
        (joined(hgx_lines()[:17] + hgx_lines()[9:10] + hgx_lines()[17:]), r"more matrix rows than the 16 devices"),
        (joined([*hgx_lines()[:16], "NIC7    SYS     SYS"]), r"row NIC7 has 2 of 16 cells \(truncated\?\)"),
        ("\tGPU0\tCPU Affinity\tCPU Affinity\nGPU0\t X \t0-7\t0-7\n", "a trailing column is named twice"),
        ("\tGPU0\tmlx5 0\nGPU0\t X \n", r"header column"),
    ],
)
def test_broken_capture_names_its_reason(text: str, message: str) -> None:
    with pytest.raises(GpuTopoError, match=message):
        parse_gpu_topo(text)


def test_hostile_bytes_and_sizes() -> None:
    data = HGX.read_bytes()
    with pytest.raises(GpuTopoError, match=r"line 2: NUL character at offset 198"):
        parse_gpu_topo(data.replace(b"NV18", b"NV\x0018", 1))
    with pytest.raises(GpuTopoError, match=r"byte 0xff at offset 9 is not UTF-8"):
        parse_gpu_topo(data[:9] + b"\xff" + data[9:])
    with pytest.raises(GpuTopoError, match=rf"capture is over {MAX_BYTES} bytes"):
        parse_gpu_topo(data * (MAX_BYTES // len(data) + 1))
    with pytest.raises(GpuTopoError, match=rf"line 2: line is {MAX_LINE + 1} characters long"):
        parse_gpu_topo(data.decode().replace("\n", "\n" + "A" * (MAX_LINE + 1) + "\n", 1))
    with pytest.raises(GpuTopoError, match="unpaired surrogate"):
        parse_gpu_topo(data.decode() + "\ud800")


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(GpuTopoError, match="cannot read"):
        parse_file(tmp_path / "absent.txt")
    assert isinstance(GpuTopoError("x"), ValueError)


def test_error_carries_line_and_location() -> None:
    with pytest.raises(GpuTopoError) as info:
        parse_gpu_topo(joined(set_cell(hgx_lines(), 3, 0, "QQQ")))
    assert info.value.line == 4 and info.value.location == "line 4"
    assert str(info.value).startswith("line 4: GPU2/GPU0:")


def test_replace_keeps_lookups_working() -> None:
    m = parse_file(HGX)
    other = replace(m, notes=("edited",))
    assert other.between("GPU0", "NIC0").label == "PIX" and other == replace(m, notes=("edited",))
