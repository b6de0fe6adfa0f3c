"""Done-when: a real Spectrum-X host's ``lldpctl -f json`` yields exactly its 32 data-plane
neighbours on one switch, drops the management port and the VF representors, maps rails."""

from __future__ import annotations

import json
from pathlib import Path

from connectors.lldpctl import HostFilter, parse_lldpctl

LOG = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "topograph" / "lldp.log"


def test_spectrum_x_host_yields_its_32_data_plane_neighbours_on_one_switch() -> None:
    result = parse_lldpctl(LOG.read_text(), "spcx-host")
    assert result.quarantined == []
    assert len(result.neighbors) == 32
    assert {n.chassis_id for n in result.neighbors} == {"f4:20:4d:da:ac:1a"}
    assert {n.sys_name for n in result.neighbors} == {"spcx-qa-spc06-02"}
    assert {n.remote_platform for n in result.neighbors} == {"cumulus"}
    assert sorted(n.local_port or "" for n in result.neighbors) == sorted(
        f"eth_r{r}_p{p}" for r in range(4) for p in range(8)
    )
    assert len({n.remote_port for n in result.neighbors}) == 32
    first = next(n for n in result.neighbors if n.local_port == "eth_r0_p0")
    assert (first.port_id, first.port_id_subtype, first.remote_port, first.rem_index) == ("swp5s4", 5, "swp5s4", 6)
    assert first.man_addrs == ("10.220.102.97", "fe80::f620:4dff:feda:ac1a")
    # the BMC/management USB NIC and all 16 VF representors are dropped, with the reason
    assert result.dropped["enxac3ae20ab81d"] == "excluded by ^enx"
    assert sorted(k for k in result.dropped if k.startswith("eth_vf")) == sorted(
        f"eth_vf{v}{rep}_r{r}" for v in (0, 1) for rep in ("", "_rep") for r in range(4)
    )
    assert len(result.dropped) == 17
    assert result.rails == {f"eth_r{r}_p{p}": r for r in range(4) for p in range(8)}


def test_filters_are_configurable() -> None:
    only_rail0 = HostFilter(exclude=(r"^eth_vf",), include=(r"^eth_r0_",))
    result = parse_lldpctl(LOG.read_text(), "spcx-host", host_filter=only_rail0)
    assert len(result.neighbors) == 8
    assert result.dropped["enxac3ae20ab81d"] == "not matched by any include pattern"
    keep_all = parse_lldpctl(LOG.read_text(), "h", host_filter=HostFilter(exclude=(), rail_pattern=None))
    assert len(keep_all.neighbors) == 49 and keep_all.rails == {}


def test_single_interface_object_form_and_unnamed_chassis() -> None:
    doc = {
        "lldp": {
            "interface": {
                "eno1": {
                    "rid": "1",
                    "chassis": {"id": {"type": "mac", "value": "02:00:00:00:00:01"}},
                    "port": {"id": {"type": "mac", "value": "02:00:00:00:00:02"}, "descr": "eno1"},
                }
            }
        }
    }
    (n,) = parse_lldpctl(json.dumps(doc), "h").neighbors
    assert (n.sys_name, n.chassis_id, n.port_id_subtype, n.remote_port) == (None, "02:00:00:00:00:01", 3, "eno1")


def test_bad_output_is_quarantined_whole_and_bad_neighbours_alone() -> None:
    text = LOG.read_text()
    truncated = parse_lldpctl(text[: len(text) // 2], "h")
    assert truncated.neighbors == []
    (q,) = truncated.quarantined
    assert q.reason.startswith("unparseable lldpctl -f json output: ")
    assert q.context == {"command": "lldpctl -f json", "platform": "linux"}
    assert q.payload == text[: len(text) // 2]
    wrong = parse_lldpctl('{"lldp-neighbors-information": []}', "h")
    assert wrong.quarantined[0].reason == (
        "unparseable lldpctl -f json output: not lldpctl JSON: no top-level 'lldp' object"
    )
    doc = json.loads(text)
    doc["lldp"]["interface"][1]["eth_r0_p0"]["chassis"]["spcx-qa-spc06-02"]["id"]["value"] = "f4:20:4d:da:ac"
    one_bad = parse_lldpctl(json.dumps(doc), "h")
    assert len(one_bad.neighbors) == 31
    (bad,) = one_bad.quarantined
    assert bad.reason == "bad neighbour on eth_r0_p0: not a MAC address: 'f4:20:4d:da:ac'"
    assert bad.location == "interface eth_r0_p0"
