"""The LLDP asset end to end: site config → SNMP twin → warehouse, fail soft per switch."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
from snmp import support
from snmp.support import SnmpSite

from assets.lldp import defs, lldp_neighbor_observations
from assets.lldp.assets import land_device
from assets.lldp.resources import SnmpCollectorResource
from core.models import LinkKind
from pipelines.resources import SiteConfigResource, WarehouseResource

pytestmark = pytest.mark.warehouse_only  # only Postgres of the site (tests/conftest.py)

snmp_site = support.snmp_site  # the shared session fixture (one snmpsim per spec)


@pytest.mark.integration
def test_asset_lands_observations_status_and_quarantine(
    snmp_site: Callable[..., SnmpSite], tmp_path: Path, warehouse  # type: ignore[no-untyped-def]
) -> None:
    site = snmp_site("h100-1su")
    config = tmp_path / "gpufabric.yaml"
    config.write_text(site.config_text)
    result = dg.materialize(
        [lldp_neighbor_observations],
        resources={
            "warehouse": WarehouseResource(),
            "site": SiteConfigResource(path=str(config)),
            "snmp_collector": SnmpCollectorResource(concurrency=16),
        },
    )
    assert result.success
    run_id = result.run_id
    meta = result.asset_materializations_for_node("raw__lldp_neighbor_observations")[0].metadata
    switches = len(site.truth.switches(fabric=LinkKind.ETH))
    expected_neighbors = sum(len(c.neighbors) for c in site.collected().values())
    assert meta["switches"].value == switches + 4
    assert meta["switches_by_status"].value == {
        "ok": switches, "timeout": 1, "auth_failure": 1, "no_data": 1, "partial": 1
    }
    assert meta["neighbors_landed"].value == expected_neighbors == 32 + 2 * 2 * 4 + 3
    assert meta["rows_quarantined"].value == 5
    with warehouse.connect() as conn:
        status = {
            r[0]: r[1:]
            for r in conn.execute(
                "SELECT device, status, rows_landed, rows_quarantined FROM ops.collection_status "
                "WHERE run_id = %s AND source = 'snmp'",
                (run_id,),
            ).fetchall()
        }
        assert status["eth-fault-timeout"] == ("timeout", 0, 0)
        assert status["eth-fault-auth"] == ("auth_failure", 0, 0)
        assert status["eth-fault-nolldp"] == ("no_data", 0, 0)
        assert status["eth-fault-garbage"] == ("partial", 3, 5)
        assert status["eth-leaf-01"] == ("ok", 10, 0)
        landed = conn.execute(
            "SELECT count(*), count(DISTINCT source) FROM raw.lldp_neighbor_observations WHERE run_id = %s",
            (run_id,),
        ).fetchone()
        assert landed == (expected_neighbors, switches + 1)
        raw_name = conn.execute(
            "SELECT sys_name, sys_name_raw FROM raw.lldp_neighbor_observations "
            "WHERE run_id = %s AND source = 'eth-fault-garbage' AND local_port = 'swp1'",
            (run_id,),
        ).fetchone()
        assert raw_name == ("peer\\xff\\xfe", b"peer\xff\xfe")
        host_row = conn.execute(
            "SELECT chassis_id_subtype, octet_length(chassis_id_raw), port_id_subtype, port_id, remote_port, "
            "man_addrs FROM raw.lldp_neighbor_observations WHERE run_id = %s AND source = 'eth-leaf-01' "
            "AND local_port = 'Ethernet1'",
            (run_id,),
        ).fetchone()
        assert host_row[:3] == (4, 6, 3) and host_row[4] == "eno1" and len(host_row[5]) == 1
        quarantine = conn.execute(
            "SELECT device, reason, location FROM ops.quarantine WHERE run_id = %s AND source = 'snmp' "
            "ORDER BY reason",
            (run_id,),
        ).fetchall()
        assert [q[1] for q in quarantine][:2] == [
            "ifHighSpeed: expected Gauge32, got OCTET STRING",
            "lldpRemChassisId: a MAC address is 6 bytes, got 5",
        ]
        # a row without lldpRemPortId is what real agents send (a QFX table has none): it lands, unported
        assert not any(q[1].startswith("incomplete row") for q in quarantine)
        unported = conn.execute(
            "SELECT port_id, sys_name FROM raw.lldp_neighbor_observations WHERE run_id = %s "
            "AND source = 'eth-fault-garbage' AND local_port = 'swp4'",
            (run_id,),
        ).fetchone()
        assert unported == (None, "peer")
        assert {q[0] for q in quarantine} == {"eth-fault-garbage"}
        assert quarantine[0][2] == "1.3.6.1.2.1.31.1.1.1.15.8"
        interfaces = conn.execute(
            "SELECT count(*) FROM raw.snmp_interfaces WHERE run_id = %s AND source = 'eth-leaf-01'", (run_id,)
        ).fetchone()
        assert interfaces == (49,)  # 48 front-panel ports + Management1
        systems = conn.execute(
            "SELECT platform, platform_source, chassis_id FROM raw.snmp_systems WHERE run_id = %s "
            "AND source = 'eth-leaf-02'",
            (run_id,),
        ).fetchone()
        leaf2 = next(d for d in site.truth.switches(fabric=LinkKind.ETH) if d.name == "eth-leaf-02")
        assert systems == ("cisco_nxos_6", "sysDescr", leaf2.id)

        # a retried landing of the same run replaces, never duplicates
        again = site.collected()["eth-leaf-01"]
        assert land_device(conn, run_id, again, "127.0.0.1", datetime.now(UTC)) == (10, 0)
        conn.commit()
        count = conn.execute(
            "SELECT count(*) FROM raw.lldp_neighbor_observations WHERE run_id = %s AND source = 'eth-leaf-01'",
            (run_id,),
        ).fetchone()
        assert count == (10,)


def test_definitions_load_with_a_stopped_15_minute_schedule() -> None:
    merged = dg.Definitions.merge(
        defs, dg.Definitions(resources={"warehouse": WarehouseResource(), "site": SiteConfigResource()})
    )
    repo = merged.get_repository_def()
    schedule = repo.get_schedule_def("lldp_every_15_minutes")
    assert schedule.cron_schedule == "*/15 * * * *"
    assert schedule.default_status is dg.DefaultScheduleStatus.STOPPED
    assert repo.get_job("lldp_discovery") is not None
