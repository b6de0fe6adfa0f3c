"""``nvidia-smi topo -m`` captures under hostile input: every real capture damaged byte by byte
and line by line (tests/unit/fuzz_inputs.py), truncated, and blown up past the size cap, plus
generated matrices. The parser's contract (connectors/gpu_topo/parser.py): it returns a matrix or
raises :class:`GpuTopoError` with a reason -- no other exception, no hang -- and a capture cut
anywhere before the end of the matrix is always an error."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from connectors.gpu_topo import MAX_BYTES, GpuTopoError, parse_gpu_topo
from core.affinity import PCIE_CLASSES, Connection, GpuInfo, NicInfo, TopoMatrix
from tests.conftest import FIXTURES
from tests.unit.fuzz_inputs import Mutated, mutated_bytes, storable

CAPTURES = sorted(p for p in (FIXTURES / "gpu-topo").glob("*.txt") if p.name != "SOURCE.txt")
SEEDS = {p.stem: p.read_bytes() for p in CAPTURES}


def outcome(data: bytes) -> TopoMatrix | GpuTopoError:
    try:
        return parse_gpu_topo(data)
    except GpuTopoError as exc:
        assert exc.reason.strip() and storable(exc.reason), exc.reason
        assert exc.location is None or re.fullmatch(r"line \d+", exc.location)
        return exc


def consistent(m: TopoMatrix) -> None:
    """What a returned matrix always satisfies, however odd its input."""
    n = len(m.devices)
    assert len(m.cells) == n and all(len(row) == n for row in m.cells)
    for i in range(n):
        assert m.cells[i][i].kind == "X"
        for j in range(n):
            assert m.cells[i][j].label == m.cells[j][i].label
    assert len(m.gpus) + len(m.nics) == n
    names = [nic.device for nic in m.nics if nic.device]
    assert len(names) == len(set(names))
    assert all(storable(d) for d in m.devices)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.sampled_from(sorted(SEEDS)).flatmap(lambda name: mutated_bytes(SEEDS[name])))
@example(data=Mutated(SEEDS["hgx-h100-8nic-sglang30401"][:700], ["truncate@700"]))
@example(data=Mutated(SEEDS["b300-9nic-ansi-header-sglang26039"].replace(b"[4m", b"\x1b[4m"), ["real ESC"]))
def test_damaged_captures_parse_or_say_why(data: Mutated) -> None:
    result = outcome(data.data)
    if isinstance(result, TopoMatrix):
        consistent(result)


def last_cell_end(data: bytes) -> int:
    """Offset just past the last row's diagonal ``X``: the end of the matrix proper."""
    m = parse_gpu_topo(data)
    lines = data.split(b"\n")
    header = next(i for i, line in enumerate(lines) if re.search(rb"GPU0\b", line))
    last = header + len(m.devices)
    start = sum(len(line) + 1 for line in lines[:last])
    cells = list(re.finditer(rb"[^ \t\r]+", lines[last]))
    return start + cells[len(m.devices)].end()


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(sorted(SEEDS)), fraction=st.floats(0, 1, exclude_max=True))
def test_a_capture_cut_inside_its_matrix_is_an_error(name: str, fraction: float) -> None:
    data = SEEDS[name]
    cut = int(last_cell_end(data) * fraction)
    result = outcome(data[:cut])
    assert isinstance(result, GpuTopoError), (name, cut)


def test_huge_captures_are_refused_before_parsing() -> None:
    for data in SEEDS.values():
        huge = data * (MAX_BYTES // len(data) + 1)
        result = outcome(huge)
        assert isinstance(result, GpuTopoError) and "over" in result.reason
        one_line = outcome(b"\tGPU0" + b"\tNIC0" * 100_000 + b"\n")
        assert isinstance(one_line, GpuTopoError) and "characters long" in one_line.reason


@st.composite
def matrices(draw: st.DrawFn) -> TopoMatrix:
    """A random well-formed matrix: GPUs joined by NVLink or PCIe, NICs by PCIe, symmetric."""
    n_gpu = draw(st.integers(1, 9))
    n_nic = draw(st.integers(0, 6))
    labels = [f"GPU{i}" for i in range(n_gpu)] + [f"NIC{i}" for i in range(n_nic)]
    n = len(labels)
    cells = [[Connection("X", 0, "X") for _ in range(n)] for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            both_gpu = j < n_gpu
            token = draw(
                st.sampled_from([*PCIE_CLASSES, "SOC", "NV1", "NV12", "NV18"] if both_gpu else [*PCIE_CLASSES, "SOC"])
            )
            cells[i][j] = cells[j][i] = Connection.parse(token)
    numa = draw(st.lists(st.integers(0, 7), min_size=n_gpu, max_size=n_gpu))
    gpus = tuple(
        GpuInfo(i, f"GPU{i}", f"{i * 8}-{i * 8 + 7}", str(numa[i]), numa[i], (numa[i],), None) for i in range(n_gpu)
    )
    named = draw(st.booleans())
    nics = tuple(NicInfo(i, f"NIC{i}", f"mlx5_{i}" if named else None) for i in range(n_nic))
    return TopoMatrix(
        devices=tuple(labels),
        cells=tuple(tuple(r) for r in cells),
        gpus=gpus,
        nics=nics,
        columns=("CPU Affinity", "NUMA Affinity", "GPU NUMA ID"),
        legend=draw(st.booleans()),
        nic_legend=named and n_nic > 0,
    )


@settings(max_examples=150, deadline=None)
@given(m=matrices(), spaces=st.booleans(), crlf=st.booleans())
def test_generated_matrices_round_trip(m: TopoMatrix, spaces: bool, crlf: bool) -> None:
    text = m.to_text()
    if spaces:
        text = text.expandtabs(8)
    if crlf:
        text = text.replace("\n", "\r\n")
    back = parse_gpu_topo(text)
    assert back.to_json() | {"notes": []} == m.to_json() | {"notes": []}


def test_seeds_are_the_real_captures() -> None:
    assert len(SEEDS) == 6 and all(isinstance(parse_gpu_topo(d), TopoMatrix) for d in SEEDS.values())
    assert Path(CAPTURES[0]).exists()
