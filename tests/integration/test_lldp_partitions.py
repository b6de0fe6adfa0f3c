"""LLDP collection by switch group, in process on the embedded default: the ``switch_groups`` asset
fills the partition set from the site file, each group is its own run that polls only its
switches, the topology's reader sees every group's rows, and re-running one group replaces only
that group's switches in what the topology reads."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from snmp import support
from snmp.support import SnmpSite

from assets.lldp import lldp_neighbor_observations, switch_groups_asset
from assets.lldp.partitions import PARTITION_SET, SIZE_ENV
from assets.lldp.resources import SnmpCollectorResource
from core.lldp.groups import switch_groups
from pipelines.resources import SiteConfigResource, WarehouseResource
from services.topology.store import load_observations
from settings import load_settings

pytestmark = [pytest.mark.integration, pytest.mark.warehouse_only]  # only Postgres of the site (tests/conftest.py)
snmp_site = support.snmp_site  # the shared session fixture (one snmpsim per spec)


def test_each_switch_group_is_its_own_run_and_topology_reads_them_all(
    snmp_site: Callable[..., SnmpSite], tmp_path: Path, warehouse: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "gpufabric.yaml"
    config.write_text(snmp_site("h100-1su").config_text)
    switches = load_settings(config).sources.switches
    size = (len(switches) + 1) // 2
    monkeypatch.setenv(SIZE_ENV, str(size))
    # Groups are cut over every switch (SNMP, SSH or both); the SNMP asset polls the SNMP ones.
    names = {s.name for s in switches if s.snmp is not None}
    groups = {k: [n for n in v if n in names] for k, v in switch_groups([s.name for s in switches], size).items()}
    assert list(groups) == ["group-000", "group-001"]
    resources = {
        "warehouse": WarehouseResource(),
        "site": SiteConfigResource(path=str(config)),
        "snmp_collector": SnmpCollectorResource(concurrency=16),
    }
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(PARTITION_SET, ["group-009"])  # left from a longer switch list
        synced = dg.materialize([switch_groups_asset], instance=instance, resources=resources)
        assert sorted(instance.get_dynamic_partitions(PARTITION_SET)) == ["group-000", "group-001"]
        assert synced.asset_materializations_for_node("switch_groups")[0].metadata["removed"].value == ["group-009"]

        def collect(key: str) -> str:
            run = dg.materialize([lldp_neighbor_observations], partition_key=key, instance=instance,
                                 resources=resources)  # fmt: skip
            assert run.success
            [mat] = run.asset_materializations_for_node("raw__lldp_neighbor_observations")
            assert mat.partition == key and mat.metadata["switch_groups"].value == [key]
            assert mat.metadata["switches"].value == len(groups[key])
            return run.run_id

        runs = {key: collect(key) for key in groups}
        with warehouse.connect() as conn:
            for key, run_id in runs.items():
                polled = {r[0] for r in conn.execute(
                    "SELECT device FROM ops.collection_status WHERE run_id = %s AND source = 'snmp'", (run_id,))}
                assert polled == set(groups[key])  # a group's run polls its switches and no other
            read = load_observations(conn).runs["lldp"]  # what the topology asset reads: source -> run
            mine = {source: run for source, run in read.items() if source in names}
            assert set(mine.values()) == set(runs.values())  # both groups' rows are read
            assert all(run == runs[key] for key in groups for s, run in mine.items() if s in groups[key])

            again = collect("group-000")
            after = {s: run for s, run in load_observations(conn).runs["lldp"].items() if s in names}
            for source, run in after.items():
                assert run == (again if source in groups["group-000"] else mine[source]), source
