"""Host-side LLDP on the real lab: ``lldpctl -f json`` from real lldpd in each host namespace, parsed
by the host-side parser, must reproduce the lab's host-to-leaf wiring (reuses test_lldp_lab's lab)."""

from __future__ import annotations

import json

import pytest
from test_lldp_lab import HOSTS, WIRING, Lab, _wait, lab

from connectors.lldpctl import HostFilter, parse_lldpctl

pytestmark = pytest.mark.standalone  # starts what it needs itself (tests/conftest.py: the scheduler)

__all__ = ["lab"]  # the fixture, re-exported for pytest


@pytest.mark.integration
def test_lldpctl_json_from_real_lldpd_on_every_host(lab: Lab) -> None:
    def host_json(dev: str) -> str:
        return lab.exec(dev, "lldpctl", "-u", str(lab.root / dev / "lldpd.ctl"), "-f", "json").stdout

    def seen(dev: str) -> bool:
        doc = json.loads(host_json(dev) or "{}")
        return bool(doc.get("lldp", {}).get("interface"))

    for dev in HOSTS:
        _wait(lambda d=dev: seen(d), f"{dev} to see its leaf")  # type: ignore[misc]
    expected = {h: sw for link in WIRING for (h, hi), sw in (link, link[::-1]) if h.startswith("h") and hi == "eno1"}
    rails = HostFilter(rail_pattern=r"^eno(?P<rail>\d+)$")
    chassis: dict[str, set[str]] = {}
    for dev in HOSTS:
        text = host_json(dev)
        result = parse_lldpctl(text, dev, host_filter=rails)
        assert result.quarantined == [], result.quarantined
        (n,) = result.neighbors  # one NIC, one leaf: lldpd's single-interface JSON shape
        leaf, leaf_port = expected[dev]
        assert (n.local_port, n.sys_name, n.port_id_subtype, n.port_id, n.remote_port) == (
            "eno1",
            leaf,
            5,
            leaf_port,
            leaf_port,
        )
        assert n.chassis_id_subtype == 4  # lldpd's chassis id: a MAC of the leaf
        chassis.setdefault(leaf, set()).add(n.chassis_id)
        assert result.rails == {"eno1": 1}
    assert {leaf: len(ids) for leaf, ids in chassis.items()} == {"l1": 1, "l2": 1}  # one chassis per leaf
    # the collected JSON goes through the management/VF filter unchanged here: nothing dropped
    assert parse_lldpctl(host_json("h1"), "h1").dropped == {}
