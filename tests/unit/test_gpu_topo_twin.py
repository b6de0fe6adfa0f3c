"""The twins' ``nvidia-smi topo -m`` (simulator/gpu_topo.py, simulator/node_agent.py): each template
is the real capture it was read from, cell for cell; the spec's matrix faults and the ground truth's
expected findings; the node agent's drop directory."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from connectors.gpu_topo import GpuTopoError, parse_file, parse_gpu_topo
from core.affinity.fleet import derive_fleet
from core.topology import derive
from simulator.generator import generate
from simulator.gpu_topo import TEMPLATES, ExpectedFinding, Slot, pcie_class
from simulator.node_agent import CAPTURED_AT, FAULT_TRUNCATED, write_drop
from simulator.spec import ClusterSpec, SpecError
from tests.unit.test_topology_support import observe, spec_of

ACROSS, SWAPPED = "gpu_topo_faults__nic_across_socket", "gpu_topo_faults__swapped_nic_order"
FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "gpu-topo"


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_each_template_is_its_real_capture_cell_for_cell(name: str) -> None:
    template = TEMPLATES[name]
    real = parse_file(FIXTURES / template.capture)
    ours = parse_gpu_topo(template.matrix().to_text())  # what the twin prints, read back by the parser
    assert ours.devices == real.devices
    assert [[c.label for c in row] for row in ours.cells] == [[c.label for c in row] for row in real.cells]
    assert [(g.numa_node, g.cpu_affinity, g.gpu_numa_id) for g in ours.gpus] == [
        (g.numa_node, g.cpu_affinity, g.gpu_numa_id) for g in real.gpus
    ]
    assert ours.columns == real.columns
    # Only the compute NICs' names differ: the kernel's mlx5_<rail>, which the fabric's HCAs carry.
    k = len(template.compute_nics)
    assert [n.device for n in ours.nics[:k]] == [f"mlx5_{i}" for i in range(k)]
    assert [n.device for n in ours.nics[k:]] == [n.device for n in real.nics[k:]]


def test_pcie_class_follows_the_legend() -> None:
    a = Slot(numa=0, root=1, switch=2)
    assert pcie_class(a, Slot(0, 1, 2)) == "PIX"
    assert pcie_class(a, Slot(0, 1, 3)) == "PXB"
    assert pcie_class(a, Slot(0, 4, 2)) == "NODE"
    assert pcie_class(a, Slot(1, 1, 2)) == "SYS"


def _spec(name: str, **changes: Any) -> ClusterSpec:
    data = spec_of(name).model_dump()
    for key, value in changes.items():
        section, _, field = key.partition("__")
        data[section][field] = value
    return ClusterSpec.model_validate(data)


def test_h100_4su_findings_derived_from_its_matrices_equal_the_ground_truth(tmp_path: Path) -> None:
    truth = generate(spec_of("h100-4su"))
    expected = truth.affinity_findings()
    assert expected == {
        ExpectedFinding("nic_across_socket", "dgx007", 3),
        ExpectedFinding("matrix_differs_from_fleet", "dgx007"),
        ExpectedFinding("matrix_differs_from_fleet", "dgx042"),
    }
    model = derive(observe(truth, tmp_path))
    matrices = {h: parse_gpu_topo(truth.gpu_topo.text(h)) for h in truth.gpu_topo.matrices}
    assert len(matrices) == 128
    fleet = derive_fleet(matrices, model)
    assert {ExpectedFinding(f.kind, f.host, f.gpu) for f in fleet.findings} == expected
    assert len(fleet.cabled) == 128
    # The swapped node's GPU0 uses the rail-1 NIC: the rail map says so, the fleet finding says why.
    swapped = fleet.node("dgx042")
    assert [(g.best_nics, g.rail) for g in swapped.gpus[:2]] == [(("mlx5_1",), "rail1"), (("mlx5_0",), "rail0")]
    assert [g.rail for g in fleet.node("dgx001").gpus] == [f"rail{i}" for i in range(8)]


def test_miscabled_ports_and_matrix_faults_together_on_b300_nodes(tmp_path: Path) -> None:
    # h100-1su with the B300 board, one miscabling (two hosts' NICs), a SYS GPU on one of those
    # hosts and a swapped NIC pair on the other: every GPU that uses a wrongly cabled NIC is reported.
    spec = _spec("h100-1su", node__topology="hgx-b300",
                 defects__miscabled_ports=[{"host": "dgx003", "rail": 2, "to_rail": 5, "with_host": "dgx009"}],
                 gpu_topo_faults__nic_across_socket=[{"host": "dgx003", "gpu": 6}],
                 gpu_topo_faults__swapped_nic_order=[{"host": "dgx009", "nics": [5, 4]}])  # fmt: skip
    truth = generate(spec)
    expected = truth.affinity_findings()
    assert expected == {
        ExpectedFinding("nic_across_socket", "dgx003", 6),
        ExpectedFinding("matrix_differs_from_fleet", "dgx003"),
        ExpectedFinding("matrix_differs_from_fleet", "dgx009"),
        ExpectedFinding("rail_miscabled", "dgx003", 2),  # its own GPU on the rail-2 NIC
        ExpectedFinding("rail_miscabled", "dgx003", 6),  # the SYS GPU: every NIC ties, the bad one too
        ExpectedFinding("rail_miscabled", "dgx009", 4),  # mlx5_5 sits in column 4 there
    }
    matrices = {h: parse_gpu_topo(truth.gpu_topo.text(h)) for h in truth.gpu_topo.matrices}
    fleet = derive_fleet(matrices, derive(observe(truth, tmp_path)))
    assert {ExpectedFinding(f.kind, f.host, f.gpu) for f in fleet.findings} == expected


def test_models_without_a_template_have_no_matrices() -> None:
    truth = generate(spec_of("gb200-nvl72"))
    assert truth.gpu_topo.template is None and not truth.gpu_topo.matrices
    assert truth.affinity_findings() == set()


@pytest.mark.parametrize(
    ("changes", "path", "message"),
    [
        ({"node__topology": "dgx-a100"}, "node.topology", "unknown topology template 'dgx-a100'"),
        ({ACROSS: [{"host": "dgx999", "gpu": 1}]}, "gpu_topo_faults.nic_across_socket[0].host",
         "'dgx999' is not one of the spec's hosts"),
        ({ACROSS: [{"host": "dgx001", "gpu": 8}]}, "gpu_topo_faults.nic_across_socket[0].gpu",
         "GPU 8 >= gpus (8)"),
        ({SWAPPED: [{"host": "dgx001", "nics": [3, 3]}]}, "gpu_topo_faults.swapped_nic_order[0].nics",
         "two distinct compute NIC columns below 8"),
        ({ACROSS: [{"host": "dgx001", "gpu": 1}], SWAPPED: [{"host": "dgx001", "nics": [0, 1]}]},
         "gpu_topo_faults.swapped_nic_order[0].host", "'dgx001' already has a matrix fault"),
    ],
)  # fmt: skip
def test_bad_matrix_faults_are_spec_errors_naming_the_field(changes: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        _spec("h100-1su", **changes)
    assert any(i.path == path and message in i.message for i in caught.value.issues), caught.value


def test_a_template_that_does_not_fit_the_node_is_refused() -> None:
    with pytest.raises(SpecError, match=r"node.topology: template 'dgx-h100' has 8 GPUs and 8 compute NICs, the node "
                                        r"4 GPUs and 4 HCAs"):  # fmt: skip
        _spec("gb200-nvl72", node__topology="dgx-h100")


def test_faults_need_a_template() -> None:
    with pytest.raises(SpecError, match="node model 'GB200 NVL72 compute tray' has no topology template"):
        _spec("gb200-nvl72", gpu_topo_faults__nic_across_socket=[{"host": "gb200-r01-t01", "gpu": 0}])


def test_node_agent_drops_one_capture_per_node_and_a_truncated_fault(tmp_path: Path) -> None:
    truth = generate(spec_of("h100-1su"))
    written = write_drop(truth, tmp_path)
    assert len(written) == 33
    dgx001 = tmp_path / "dgx001.txt"
    assert parse_file(dgx001).signature() == truth.gpu_topo.matrices["dgx001"].signature()
    assert os.stat(dgx001).st_mtime == CAPTURED_AT.timestamp()
    with pytest.raises(GpuTopoError, match="rows"):
        parse_file(tmp_path / f"{FAULT_TRUNCATED}.txt")
