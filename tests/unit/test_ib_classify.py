"""core.infiniband: rates, GUIDs, hostname rules and node classes as data."""

from __future__ import annotations

import pytest

from core.infiniband import (
    Classifier,
    HcaFilter,
    NodeClass,
    internal_port,
    link_gbps,
    normalise_guid,
    parse_hca_description,
    parse_switch_description,
)


@pytest.mark.parametrize(
    ("width", "speed", "gbps"),
    [("4x", "HDR", 200.0), ("4x", "NDR", 400.0), ("IB_4x", "ndr", 400.0), ("2x", "NDR", 200.0), ("4", "XDR", 800.0),
     ("1x", "FDR10", 10.0), ("12x", "QDR", 120.0)],
)  # fmt: skip
def test_link_rates(width: str, speed: str, gbps: float) -> None:
    assert link_gbps(width, speed) == gbps


def test_bad_rates_and_guids_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown link speed 'QQR'"):
        link_gbps("4x", "QQR")
    with pytest.raises(ValueError, match="unknown link width '3x'"):
        link_gbps("3x", "HDR")
    assert normalise_guid("0xB83FD2030000ABCD") == "0xb83fd2030000abcd"
    assert normalise_guid("abcd") == "0x000000000000abcd"
    assert normalise_guid(1) == "0x0000000000000001"
    for bad in ("", "0x", "xyz", "1" * 17):
        with pytest.raises(ValueError, match="not a 64-bit GUID"):
            normalise_guid(bad)


def test_description_rules() -> None:
    assert parse_hca_description("dgx001 mlx5_3") == ("dgx001", "mlx5_3", "hostname_mlx5")
    assert parse_hca_description("gb200-n01-c1 HCA-2") == ("gb200-n01-c1", "HCA-2", "hostname_hca_n")
    assert parse_hca_description("node7 mlx5_bond_0") == ("node7", "mlx5_bond_0", "hostname_mlx5")
    assert parse_hca_description("dgx001") is None
    assert parse_switch_description("MF0;ib-spine-03:MQM9700/U1") == ("ib-spine-03", "MQM9700")
    assert parse_switch_description("MF0;leaf7:MQM8790") == ("leaf7", "MQM8790")
    assert parse_switch_description("Quantum Mellanox Technologies") is None
    assert internal_port("MQM9700", 65) and not internal_port("MQM9700", 64)
    assert not internal_port(None, 65) and not internal_port("unknown-model", 99)


@pytest.mark.parametrize(
    ("node_type", "description", "expected", "host"),
    [
        ("ca", "dgx001 mlx5_0", NodeClass.COMPUTE_HCA, "dgx001"),
        ("ca", "", NodeClass.UNNAMED_HCA, None),
        ("ca", "   ", NodeClass.UNNAMED_HCA, None),
        ("ca", "MT4129 ConnectX7   Mellanox Technologies", NodeClass.UNNAMED_HCA, None),
        ("ca", "Mellanox Technologies ConnectX-7", NodeClass.UNNAMED_HCA, None),
        ("ca", "localhost mlx5_0", NodeClass.DEFAULT_HOSTNAME, "localhost"),
        ("ca", "ubuntu HCA-1", NodeClass.DEFAULT_HOSTNAME, "ubuntu"),
        ("ca", "ufm-01 mlx5_0", NodeClass.UFM_SERVER, "ufm-01"),
        ("ca", "ufm mlx5_1", NodeClass.UFM_SERVER, "ufm"),
        ("ca", "Mellanox Technologies Aggregation Node", NodeClass.SHARP_AGGREGATION_NODE, None),
        ("ca", "ddn-oss01 mlx5_0", NodeClass.STORAGE, "ddn-oss01"),
        ("ca", "vast-cnode-3 mlx5_0", NodeClass.STORAGE, "vast-cnode-3"),
        ("ca", "mgmt01 mlx5_0", NodeClass.MANAGEMENT, "mgmt01"),
        ("ca", "slurm-head-1 mlx5_0", NodeClass.MANAGEMENT, "slurm-head-1"),
        ("ca", "login02 mlx5_0", NodeClass.LOGIN, "login02"),
        ("ca", "lgn-1 HCA-1", NodeClass.LOGIN, "lgn-1"),
        # Names no strict rule reads: compute at ingest; topology derivation sets them apart by the
        # fleet pattern (tests/unit/test_topology_core.py), where the looser role hints name them.
        ("ca", "fabricmgr01 mlx5_0", NodeClass.COMPUTE_HCA, "fabricmgr01"),
        ("ca", "fm01 mlx5_1", NodeClass.COMPUTE_HCA, "fm01"),
        ("ca", "something odd", NodeClass.UNKNOWN_CA, None),
        ("router", "gw", NodeClass.ROUTER, None),
        ("switch", "MF0;x:MQM9700/U1", NodeClass.SWITCH, None),
        ("ca", "bufmaster01 mlx5_0", NodeClass.COMPUTE_HCA, "bufmaster01"),  # 'ufm' inside a word is not UFM
    ],
)
def test_classifier(node_type: str, description: str, expected: NodeClass, host: str | None) -> None:
    c = Classifier().classify(node_type, description)
    assert c.node_class is expected, c.reason
    assert c.hostname == host


def test_site_filter_adds_to_the_defaults() -> None:
    f = HcaFilter.from_mapping({"storage": [r"^scratch\d+$"], "exclude": [r"^dgx0(0[1-2])$"]})
    c = Classifier(f)
    assert c.classify("ca", "scratch7 mlx5_0").node_class is NodeClass.STORAGE
    assert c.classify("ca", "ddn-oss01 mlx5_0").node_class is NodeClass.STORAGE  # built-in still on
    assert c.classify("ca", "dgx002 mlx5_0").node_class is NodeClass.EXCLUDED
    assert c.classify("ca", "dgx003 mlx5_0").node_class is NodeClass.COMPUTE_HCA


def test_site_login_class_and_the_order_of_classes() -> None:
    """A site's login pattern is a class of its own; exclude still comes before every other class."""
    f = HcaFilter.from_mapping({"login": [r"^gate\d+$"], "exclude": [r"^gate9$"]})
    c = Classifier(f)
    gate = c.classify("ca", "gate1 mlx5_0")
    assert (gate.node_class, gate.reason) == (NodeClass.LOGIN, "login rule '^gate\\\\d+$' matched 'gate1'")
    assert c.classify("ca", "gate9 mlx5_0").node_class is NodeClass.EXCLUDED
    assert c.classify("ca", "login3 mlx5_0").node_class is NodeClass.LOGIN  # built-in still on
    assert Classifier().classify("ca", "gate1 mlx5_0").node_class is NodeClass.COMPUTE_HCA
