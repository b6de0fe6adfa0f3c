"""What gpufabric tells the cluster about GPU-NIC affinity (core/affinity/render.py): the node label
and annotation, the kubelet snippet per pool with its reason, and the DRA claim template. Their
validity on the real API server is tested in tests/integration/test_affinity_asset.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from connectors.gpu_topo import parse_file
from core.affinity import derive_node
from core.affinity.derive import NodeAffinity
from core.affinity.fleet import derive_fleet
from core.affinity.render import (
    PCIE_ROOT_ATTRIBUTE,
    affinity_class,
    affinity_map,
    kubelet_config,
    node_patch,
    resource_claim_template,
    validate_kubelet_config,
)
from simulator.generator import generate
from tests.unit.test_topology_support import spec_of

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "gpu-topo"


def _node(capture: str, host: str = "n1") -> NodeAffinity:
    return derive_node(host, parse_file(FIXTURES / capture))


@pytest.fixture(scope="module")
def h100_fleet():  # type: ignore[no-untyped-def]
    truth = generate(spec_of("h100-4su"))
    return derive_fleet(dict(truth.gpu_topo.matrices))


def test_classes_on_real_captures() -> None:
    assert affinity_class(_node("dgx-h100-13nic-renamed-penny.txt")) == "aligned"  # PIX everywhere
    assert affinity_class(_node("b300-9nic-ansi-header-sglang26039.txt")) == "aligned"  # PXB: one switch tree
    assert affinity_class(_node("rtx4090-pcie-2nic-gpuallocator17.txt")) == "degraded"  # SYS and PHB GPUs
    assert affinity_class(dataclasses.replace(_node("dgx-h100-13nic-renamed-penny.txt"), gpus=())) == "unknown"


def test_fleet_findings_degrade_the_label_but_not_the_kubelet_choice(h100_fleet) -> None:  # type: ignore[no-untyped-def]
    swapped = h100_fleet.node("dgx042")  # physically aligned; its NIC names differ from the fleet's
    assert affinity_class(swapped) == "aligned"
    assert affinity_class(swapped, h100_fleet.findings_of("dgx042")) == "degraded"
    assert affinity_class(h100_fleet.node("dgx007")) == "degraded"  # GPU3 SYS
    assert kubelet_config("p", [swapped]).config["topologyManagerPolicy"] == "restricted"


def test_annotation_is_compact_json_of_each_gpus_nic_class_numa_and_rail(h100_fleet) -> None:  # type: ignore[no-untyped-def]
    node = h100_fleet.node("dgx042")
    text = affinity_map(node)
    assert " " not in text
    doc = json.loads(text)
    assert doc["v"] == 1
    assert doc["gpus"][0] == {"g": 0, "nics": ["mlx5_1"], "c": "PIX", "numa": 0, "rail": None}  # no fabric: no rail
    patch = node_patch(node, "example.com", h100_fleet.findings_of("dgx042"))
    assert patch["metadata"]["labels"] == {"topology.example.com/gpu-nic-affinity": "degraded"}
    assert json.loads(patch["metadata"]["annotations"]["topology.example.com/gpu-nic-map"]) == doc


def test_kubelet_policy_follows_alignment_and_pod_size(h100_fleet) -> None:  # type: ignore[no-untyped-def]
    clean = [n for n in h100_fleet.nodes if n.host not in ("dgx007", "dgx042")]
    whole = kubelet_config("dgx", clean)
    assert (whole.config["topologyManagerPolicy"], whole.config["topologyManagerScope"]) == ("restricted", "pod")
    assert "single-numa-node would refuse them" in whole.reason
    small = kubelet_config("dgx", clean, max_gpus_per_pod=4)
    assert small.config["topologyManagerPolicy"] == "single-numa-node"
    assert kubelet_config("dgx", clean, max_gpus_per_pod=5).config["topologyManagerPolicy"] == "restricted"
    mixed = kubelet_config("dgx", h100_fleet.nodes)
    assert mixed.config["topologyManagerPolicy"] == "best-effort"
    assert "1 of 128 nodes are not aligned (dgx007)" in mixed.reason
    for snippet in (whole, small, mixed):
        assert snippet.config["cpuManagerPolicy"] == "static"
        assert snippet.config["reservedSystemCPUs"] == "0,56,112,168"  # one core + SMT sibling per socket
        assert validate_kubelet_config(snippet.config) == []
        text = snippet.to_yaml()
        assert yaml.safe_load(text) == snippet.config  # the reason rides along as comments only
        assert text.startswith("# gpufabric: kubelet settings for node pool dgx")


def test_without_cpu_lists_the_cpu_manager_stays_off() -> None:
    node = _node("hgx-h100-8nic-sglang30401.txt")
    bare = dataclasses.replace(node, gpus=tuple(dataclasses.replace(g, cpu_affinity=None) for g in node.gpus))
    snippet = kubelet_config("p", [bare])
    assert snippet.config["cpuManagerPolicy"] == "none" and "reservedSystemCPUs" not in snippet.config
    assert validate_kubelet_config(snippet.config) == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"topologyManagerPolicy": "single-numa"}, "topologyManagerPolicy 'single-numa' must be one of"),
        ({"topologyManagerScope": "node"}, "topologyManagerScope 'node' must be one of container, pod"),
        ({"cpuManagerPolicy": "Static"}, "cpuManagerPolicy 'Static' must be one of none, static"),
        ({"reservedSystemCPUs": "0-"}, "reservedSystemCPUs '0-' is not a CPU list"),
        ({"reservedSystemCPUs": "5-1"}, "reservedSystemCPUs '5-1' is not a CPU list"),
        ({"reservedSystemCPUs": ""}, "cpuManagerPolicy static needs a CPU reservation"),
        ({"topologyManagerPolicyy": "none"}, "unknown field 'topologyManagerPolicyy'"),
        ({"apiVersion": "kubelet.config.k8s.io/v1"}, "apiVersion/kind must be kubelet.config.k8s.io/v1beta1"),
    ],
)
def test_validation_refuses_what_kubelet_refuses(h100_fleet, change: dict[str, str], problem: str) -> None:  # type: ignore[no-untyped-def]
    config = {**kubelet_config("p", h100_fleet.nodes[:3]).config, **change}
    assert any(problem in p for p in validate_kubelet_config(config)), validate_kubelet_config(config)


def test_claim_template_pairs_each_gpu_with_a_nic_on_its_pcie_root() -> None:
    one = resource_claim_template("pair", "team-a")
    assert (one["apiVersion"], one["kind"]) == ("resource.k8s.io/v1", "ResourceClaimTemplate")
    devices = one["spec"]["spec"]["devices"]
    assert [r["name"] for r in devices["requests"]] == ["gpu", "nic"]
    assert devices["constraints"] == [{"requests": ["gpu", "nic"], "matchAttribute": PCIE_ROOT_ATTRIBUTE}]
    four = resource_claim_template("pairs", "team-a", nic_class="rdma.example.com", pairs=4)["spec"]["spec"]["devices"]
    assert len(four["requests"]) == 8 and len(four["constraints"]) == 4
    assert four["constraints"][3]["requests"] == ["gpu-3", "nic-3"]
    assert {r["exactly"]["deviceClassName"] for r in four["requests"]} == {"gpu.nvidia.com", "rdma.example.com"}
