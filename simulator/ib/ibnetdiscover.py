"""Render a ground truth's InfiniBand fabric as ``ibnetdiscover`` prints it.

The same text serves two purposes: it is the saved output an operator hands over (generated for
any spec, NDR and XDR included), and it is the topology file of the real fabric simulator ibsim,
whose parser reads ibnetdiscover's own format (``switchguid=``/``caguid=`` lines set each node's
GUID, ``lid N`` sets lids, ``4xHDR`` sets enabled width and speed). Layout follows infiniband-diags
44: a banner, then one block per node (switches first, then adapters), each link printed from
both ends.

Quantum-2 switches report 65 ports: 64 front-panel ports and the internal port 65 where the SHARP
Aggregation Node lives; with ``sharp=True`` (the default for quantum2) each such switch gets its
aggregation-node CA on port 65, as real NDR fabrics show.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from core.models import DeviceKind, LinkKind
from simulator.generator import GroundTruth

SPEED_NAME: dict[int, str] = {200: "HDR", 400: "NDR", 800: "XDR"}
"""Link rate of a 4x port (ground truth) -> ibnetdiscover's speed word."""

VENDOR_ID = "0x2c9"  # Mellanox
DEVICE_IDS: dict[str, str] = {
    # PCI device ids infiniband-diags prints as devid: Quantum 0xcf08, Quantum-2 0xd2f0,
    # ConnectX-6 0x101b, ConnectX-7 0x1021, ConnectX-8 0x1023.
    "MQM8700": "0xcf08",
    "MQM9700": "0xd2f0",
    "Q3400-RA": "0xd2f2",
    "ConnectX-6": "0x101b",
    "ConnectX-7": "0x1021",
    "ConnectX-8": "0x1023",
}
SHARP_DESCRIPTION = "Mellanox Technologies Aggregation Node"
SHARP_PORT = 65


@dataclass(frozen=True)
class _Node:
    guid: str  # 0x + 16 hex
    kind: str  # Switch | Ca
    ports: int
    description: str
    devid: str
    lid: int


def _hex(guid: str) -> str:
    return guid.removeprefix("0x")


def sharp_guid(switch_guid: str) -> str:
    """A deterministic GUID for a switch's aggregation node (derived, so it is stable per seed)."""
    h = hashlib.blake2b(f"sharp|{switch_guid}".encode(), digest_size=4).hexdigest()
    return f"0x{_hex(switch_guid)[:8]}{h}"


def render_lines(truth: GroundTruth, *, sharp: bool | None = None, banner: bool = True) -> Iterator[str]:
    """The output line by line (no newlines), so a 16-SU fabric can be streamed to a file."""
    speed_name = SPEED_NAME[truth.spec.link_speed_gbps]
    switches = sorted(truth.switches(fabric=LinkKind.IB), key=lambda d: d.name)
    hcas = sorted(truth.hcas(), key=lambda d: (d.parent_id or "", d.attributes.get("rail", 0)))
    lid = 0
    nodes: dict[str, _Node] = {}
    an_of: dict[str, _Node] = {}
    for sw in switches:
        lid += 1
        model = str(sw.attributes["model"])
        radix = int(sw.attributes["radix"])
        with_an = (sharp if sharp is not None else sw.platform == "quantum2") and radix < SHARP_PORT
        nodes[sw.id] = _Node(
            sw.id,
            "Switch",
            SHARP_PORT if with_an else radix,
            f"MF0;{sw.name}:{model}/U1",
            DEVICE_IDS.get(model, "0x0"),
            lid,
        )
        if with_an:
            an_of[sw.id] = _Node(sharp_guid(sw.id), "Ca", 1, SHARP_DESCRIPTION, "0xcf09", 0)
    for hca in hcas:
        lid += 1
        model = str(hca.attributes.get("model", ""))
        nodes[hca.id] = _Node(
            hca.id, "Ca", 1, str(hca.attributes.get("node_description", hca.name)), DEVICE_IDS.get(model, "0x0"), lid
        )
    for sw_id, an in list(an_of.items()):
        lid += 1
        an_of[sw_id] = _Node(an.guid, an.kind, an.ports, an.description, an.devid, lid)

    ib_links = [lk for lk in truth.links if lk.kind is LinkKind.IB]
    ends: dict[str, list[tuple[int, str, int]]] = {}
    for lk in ib_links:
        ends.setdefault(lk.a.device_id, []).append((int(lk.a.port), lk.b.device_id, int(lk.b.port)))
        ends.setdefault(lk.b.device_id, []).append((int(lk.b.port), lk.a.device_id, int(lk.a.port)))
    for sw_id, an in an_of.items():
        ends.setdefault(sw_id, []).append((SHARP_PORT, an.guid, 1))
        ends.setdefault(an.guid, []).append((1, sw_id, SHARP_PORT))
    every = {**nodes, **{an.guid: an for an in an_of.values()}}

    if banner:
        first = switches[0].id if switches else (hcas[0].id if hcas else "0x0")
        yield "#"
        yield "# Topology file: generated on Wed Dec  2 12:00:00 2026"
        yield "#"
        yield f"# Initiated from node {_hex(first)} port {_hex(first)}"
        yield ""
    order = [nodes[s.id] for s in switches] + [nodes[h.id] for h in hcas] + list(an_of.values())
    for node in order:
        yield f"vendid={VENDOR_ID}"
        yield f"devid={node.devid}"
        yield f"sysimgguid={node.guid}"
        if node.kind == "Switch":
            yield f"switchguid={node.guid}({_hex(node.guid)})"
            yield (
                f'Switch\t{node.ports} "S-{_hex(node.guid)}"\t\t# "{node.description}" '
                f"enhanced port 0 lid {node.lid} lmc 0"
            )
        else:
            yield f"caguid={node.guid}"
            yield f'Ca\t{node.ports} "H-{_hex(node.guid)}"\t\t# "{node.description}"'
        for port, peer_id, peer_port in sorted(ends.get(node.guid, [])):
            peer = every[peer_id]
            pp = "S" if peer.kind == "Switch" else "H"
            if node.kind == "Switch":
                peer_pguid = _hex(peer.guid)
                yield (
                    f'[{port}]\t"{pp}-{_hex(peer.guid)}"[{peer_port}]({peer_pguid}) \t\t# "{peer.description}" '
                    f"lid {peer.lid} 4x{speed_name}"
                )
            else:
                yield (
                    f'[{port}]({_hex(node.guid)}) \t"{pp}-{_hex(peer.guid)}"[{peer_port}]\t\t# lid {node.lid} lmc 0 '
                    f'"{peer.description}" lid {peer.lid} 4x{speed_name}'
                )
        yield ""


def write_ibnetdiscover(truth: GroundTruth, path: str | Path, *, sharp: bool | None = None) -> Path:
    """Write the output to ``path`` (streamed) and return it."""
    path = Path(path)
    with path.open("w", encoding="utf-8") as fh:
        for line in render_lines(truth, sharp=sharp):
            fh.write(line)
            fh.write("\n")
    return path


def ib_device_count(truth: GroundTruth) -> tuple[int, int]:
    """(switches, adapters) of the IB fabric, for sizing ibsim."""
    return len(truth.switches(fabric=LinkKind.IB)), sum(1 for d in truth.devices if d.kind is DeviceKind.HCA)
