"""Shared by the SNMP/LLDP integration tests: the twin per shipped spec (one snmpsim per spec per
session), collection helpers, and resolution of what was collected through the production path
(asset row writers -> ``services.topology.rows`` -> ``core.topology.ethernet.resolve_ethernet``)
compared with the ground truth."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from assets.lldp.assets import targets_from
from connectors.snmp import CollectionStats, CollectorOptions, LldpCollection, collect
from core.lldp import normalise_interface
from core.models import LinkKind
from core.topology.ethernet import EthResult, resolve_ethernet
from core.topology.inputs import EthInterfaceObs, EthSystemObs, HostnameRules, LldpObs
from services.topology import rows as R
from settings import Settings, parse_settings
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

    @property
    def addresses(self) -> dict[str, str]:
        """Configured switch name -> address (what the asset records in raw.snmp_systems)."""
        return {s.name: s.address for s in self.settings.sources.switches}

    def observations(self, collections: dict[str, LldpCollection] | None = None) -> EthObservations:
        """The SNMP asset's rows for ``collections`` (default: this session's), read back."""
        return snmp_observations(self.collected() if collections is None else collections, self.addresses)

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
# resolution through the production path, compared with the ground truth
# ------------------------------------------------------------------------------------------------
#
# Collections become the rows the assets land (their own row writers, in their column order) and
# those rows become observation records through ``services.topology.rows`` -- the adapter the
# topology asset reads ``raw.*`` with -- so what ``core.topology.ethernet.resolve_ethernet`` sees
# here is exactly what it sees after a warehouse round trip. The truth is spelled the way the
# production names things: a switch by its chassis MAC, a host by its name, a port by
# ``core.lldp.normalise_interface`` of the vendor spelling (``Eth1/1`` is ``Ethernet1/1``).

End = tuple[str, str]  # (device id, canonical port name)
Link = frozenset[End]
AT = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class EthObservations:
    lldp: list[LldpObs]
    systems: list[EthSystemObs]
    interfaces: list[EthInterfaceObs]


def snmp_observations(
    collections: dict[str, LldpCollection], addresses: dict[str, str], run_id: str = "run"
) -> EthObservations:
    """What the SNMP asset lands for these collections (LLDP rows, systems, interfaces), read back
    as the topology asset reads them."""
    from assets.lldp.assets import (
        INTERFACE_COLUMNS,
        OBSERVATION_COLUMNS,
        SYSTEM_COLUMNS,
        interface_rows,
        observation_rows,
        system_rows,
    )

    lldp: list[LldpObs] = []
    systems: list[EthSystemObs] = []
    interfaces: list[EthInterfaceObs] = []
    for c in collections.values():
        lldp += [R.lldp(d) for d in R.rows_as_dicts(OBSERVATION_COLUMNS, observation_rows(run_id, AT, c))]
        interfaces += [R.eth_interface(d) for d in R.rows_as_dicts(INTERFACE_COLUMNS, interface_rows(run_id, AT, c))]
        systems += [
            R.eth_system(d)
            for d in R.rows_as_dicts(SYSTEM_COLUMNS, system_rows(run_id, AT, addresses.get(c.device, ""), c))
        ]
    return EthObservations(lldp, systems, interfaces)


def cli_lldp(collections: dict[str, Any], run_id: str = "run") -> list[LldpObs]:
    """What the SSH/CLI asset lands for these collections (``collector`` = 'cli'), read back."""
    from assets.lldp.assets import OBSERVATION_COLUMNS
    from assets.lldp_cli.assets import observation_rows

    return [
        R.lldp(d)
        for c in collections.values()
        for d in R.rows_as_dicts(
            OBSERVATION_COLUMNS, observation_rows(run_id, AT, c.device, c.platform, "cli", c.neighbors)
        )
    ]


def resolve_production(truth: GroundTruth, obs: EthObservations) -> EthResult:
    """``core.topology.ethernet.resolve_ethernet`` on the rows, with the default hostname rules and
    the hosts an inventory would name (the truth's host names), as ``core.topology.derive`` calls it."""
    return resolve_ethernet(obs.lldp, obs.systems, obs.interfaces, truth.spec.host_names, HostnameRules())


def derived_links(result: EthResult) -> dict[Link, dict[str, Any]]:
    """Every resolved link as an unordered pair of ends, with its evidence entry."""
    return {frozenset({(k[0], k[1]), (k[2], k[3])}): v for k, v in result.links.items()}


def truth_eth_links(truth: GroundTruth) -> set[Link]:
    """The truth's Ethernet cables, spelled as the production spells them."""
    return {
        frozenset(
            {(link.a.device_id, normalise_interface(link.a.port)), (link.b.device_id, normalise_interface(link.b.port))}
        )
        for link in truth.links
        if link.kind is LinkKind.ETH
    }


def split_by_truth(truth: GroundTruth, links: dict[Link, dict[str, Any]]) -> tuple[set[Link], set[Link]]:
    """(links whose ends are all devices of the truth, the rest): the twin's fault switches are not
    in the truth, and what a partly broken one still answers resolves to links of its own."""
    known = {d.id for d in truth.devices}
    inside = {lk for lk in links if all(dev in known for dev, _ in lk)}
    return inside, set(links) - inside


def status_counts(collections: dict[str, LldpCollection]) -> Counter[str]:
    return Counter(str(c.status) for c in collections.values())


def collect_stats() -> CollectionStats:
    return CollectionStats()
