"""Shared by the SNMP/LLDP integration tests: the twin per shipped spec (one snmpsim per spec per
session), collection helpers and resolution of observations against the ground truth."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from assets.lldp.assets import targets_from
from connectors.snmp import CollectionStats, CollectorOptions, LldpCollection, collect
from core.lldp import LldpNeighbor, normalise_interface
from core.models import DeviceKind, LinkKind
from pipelines.settings import Settings, parse_settings
from simulator.generator import GroundTruth, generate
from simulator.spec import ClusterSpec, load_spec
from simulator.specs import resolve_spec_path

SHIPPED_SPECS = ("h100-1su", "h100-4su", "b200-16su", "gb200-nvl72")


@dataclass
class SnmpSite:
    """A running SNMP twin and the site config that names it."""

    truth: GroundTruth
    settings: Settings
    config_text: str
    extra: dict[str, Any]
    pid: int | None  # our own snmpsim (None when the shared `simulated` fixture owns it)
    _collected: dict[str, LldpCollection] | None = None

    @property
    def port(self) -> int:
        return int(self.extra["port"])

    @property
    def faults(self) -> dict[str, str]:
        return dict(self.extra["faults"])

    def collected(self) -> dict[str, LldpCollection]:
        """One collection per site per session, shared by read-only tests (walks cost CPU)."""
        if self._collected is None:
            self._collected = self.collect()
        return self._collected

    def collect(self, options: CollectorOptions | None = None) -> dict[str, LldpCollection]:
        targets, failed = targets_from(self.settings.sources.switches)
        out = {c.device: c for c in failed}
        out.update({c.device: c for c in collect(targets, options or CollectorOptions(concurrency=32))})
        return out


def _spec_with(spec: ClusterSpec, **defects: Any) -> ClusterSpec:
    from simulator.spec import parse_spec

    data = spec.model_dump(mode="json")
    data["defects"] = {**data.get("defects", {}), **defects}
    return parse_spec(data)


_STARTED: dict[tuple[str, tuple[tuple[str, Any], ...]], SnmpSite] = {}


@pytest.fixture(scope="session")
def snmp_site(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., SnmpSite]]:
    """``snmp_site("h100-1su")`` → the SNMP twin of a shipped spec, started once per session.

    Uses the shared ``simulated`` fixture when the SNMP twin is registered in ``simulator.up.TWINS``,
    else starts its own snmpsim. ``snmp_site("h100-1su", duplicate_sysnames=1)`` adds defects
    (always our own snmpsim).
    """
    from simulator.snmp import start_twin, stop
    from simulator.up import TWINS

    started = _STARTED  # module-global: every test module importing this fixture shares the twins

    def get(spec_name: str, **defects: Any) -> SnmpSite:
        key = (spec_name, tuple(sorted(defects.items())))
        if key in started:
            return started[key]
        if not defects and any(t.name == "snmp" for t in TWINS):
            sim = request.getfixturevalue("simulated")(spec_name)
            run = sim.twin("snmp")
            text = Path(sim.config_path).read_text()
            site = SnmpSite(sim.truth, parse_settings(text), text, run.extra, None)
        else:
            spec = load_spec(resolve_spec_path(spec_name))
            if defects:
                spec = _spec_with(spec, **defects)
            truth = generate(spec)
            workdir = tmp_path_factory.mktemp(f"snmp-{spec_name}")
            run = start_twin(truth, workdir)
            text = yaml.safe_dump({"version": 1, "sources": run.sources}, sort_keys=False)
            site = SnmpSite(truth, parse_settings(text), text, run.extra, run.pids[0])
        started[key] = site
        return site

    yield get
    for key, site in list(started.items()):
        if site.pid is not None:
            stop(site.pid)
        started.pop(key, None)


# ------------------------------------------------------------------------------------------------
# resolution against the ground truth
# ------------------------------------------------------------------------------------------------

End = tuple[str, str]  # (device id, port name as the truth spells it)


@dataclass
class Resolution:
    links: dict[frozenset[End], set[str]]  # link -> the devices (ids) that saw it
    unresolved: list[tuple[str, LldpNeighbor, str]]


def truth_eth_links(truth: GroundTruth) -> set[frozenset[End]]:
    return {
        frozenset({(link.a.device_id, link.a.port), (link.b.device_id, link.b.port)})
        for link in truth.links
        if link.kind is LinkKind.ETH
    }


def resolve(truth: GroundTruth, collections: dict[str, LldpCollection]) -> Resolution:
    """Map every observation to truth ports: the local end by (switch, normalised port name), the
    remote end by chassis MAC + advertised port name (switches) or by port MAC (hosts)."""
    by_config_name: dict[str, str] = {}
    switch_port: dict[tuple[str, str], str] = {}
    mac_port: dict[str, End] = {}
    for dev in truth.switches(fabric=LinkKind.ETH):
        by_config_name[str(dev.attributes.get("inventory_name", dev.name))] = dev.id
        for p in truth.ports_of(dev.id):
            switch_port[(dev.id, normalise_interface(p.port))] = p.port
    for dev in truth.devices:
        if dev.kind is DeviceKind.HOST:
            for p in truth.ports_of(dev.id):
                if p.mac:
                    mac_port[p.mac] = (dev.id, p.port)
    links: dict[frozenset[End], set[str]] = defaultdict(set)
    unresolved: list[tuple[str, LldpNeighbor, str]] = []
    for name, c in collections.items():
        local_id = by_config_name.get(name)
        if local_id is None:
            continue  # fault switches are not in the truth
        for n in c.neighbors:
            local = switch_port.get((local_id, n.local_port or ""))
            if local is None:
                unresolved.append((name, n, f"local port {n.local_port!r} unknown"))
                continue
            remote: End | None = None
            if n.chassis_id_subtype == 4 and (n.chassis_id, normalise_interface(n.remote_port or "")) in switch_port:
                remote = (n.chassis_id, switch_port[(n.chassis_id, normalise_interface(n.remote_port or ""))])
            elif n.port_id_subtype == 3 and n.port_id in mac_port:
                remote = mac_port[n.port_id]
            if remote is None:
                unresolved.append((name, n, "remote end not in the truth"))
                continue
            links[frozenset({(local_id, local), remote})].add(local_id)
    return Resolution(dict(links), unresolved)


def status_counts(collections: dict[str, LldpCollection]) -> Counter[str]:
    return Counter(str(c.status) for c in collections.values())


def collect_stats() -> CollectionStats:
    return CollectionStats()
