"""Cross-check: the collector's walk equals what net-snmp's snmpbulkwalk returns from the same twin."""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import Callable

import pytest
from snmp import support
from snmp.support import SnmpSite

from assets.lldp.assets import targets_from
from connectors.snmp import CollectorOptions, DeviceWalk, walk_devices
from connectors.snmp.oids import WALK_BASES, dotted
from simulator.snmp.twin import V3_AUTH_KEY, V3_PRIV_KEY, V3_USER

pytestmark = pytest.mark.standalone  # starts what it needs itself (tests/conftest.py: the scheduler)

_LINE = re.compile(r"^(?P<oid>\.[\d.]+) = (?:(?P<type>[\w-]+): ?)?(?P<value>.*)$")


def _net_snmp(site: SnmpSite, name: str, base: str) -> dict[tuple[int, ...], tuple[str, object]]:
    switch = next(s for s in site.settings.sources.switches if s.name == name)
    assert switch.snmp is not None
    if switch.snmp.version == "2c":
        auth = ["-v2c", "-c", name]
    else:
        auth = ["-v3", "-l", "authPriv", "-u", V3_USER, "-a", "SHA", "-A", V3_AUTH_KEY, "-x", "AES", "-X", V3_PRIV_KEY]
        auth += ["-n", name]
    out = subprocess.run(
        ["snmpbulkwalk", *auth, "-On", "-Ox", "-Oe", "-Ot", "-Cr40", "-t", "5", "-r", "1",
         f"127.0.0.1:{site.port}", base],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    table: dict[tuple[int, ...], tuple[str, object]] = {}
    prefix = tuple(int(x) for x in base.split("."))
    lines: list[str] = []
    for line in out.splitlines():
        if line.startswith(".") or not lines:
            lines.append(line)
        else:  # net-snmp wraps long Hex-STRINGs over several lines
            lines[-1] += " " + line
    for line in lines:
        m = _LINE.match(line)
        assert m, line
        oid = tuple(int(x) for x in m["oid"].strip(".").split("."))
        kind, value = m["type"] or "", m["value"].strip()
        if value.startswith(("No Such Instance", "No Such Object", "No more variables")):
            continue  # snmpbulkwalk GETs the base OID of an empty subtree; there is nothing to compare
        if kind == "Hex-STRING" or (kind == "" and value == '""'):
            table[oid[len(prefix):]] = ("octets", bytes.fromhex(value.replace(" ", "").strip('"')))
        elif kind == "STRING":
            table[oid[len(prefix):]] = ("octets", value.strip('"').encode())
        elif kind == "OID":
            table[oid[len(prefix):]] = ("oid", value.lstrip("."))
        else:
            table[oid[len(prefix):]] = ("number", int(value))
    return table


def _ours(site: SnmpSite, name: str) -> DeviceWalk:
    targets, _ = targets_from([s for s in site.settings.sources.switches if s.name == name])

    async def run() -> DeviceWalk:
        async for walk in walk_devices(targets, CollectorOptions()):
            return walk
        raise AssertionError("no walk")

    return asyncio.run(run())


snmp_site = support.snmp_site  # the shared session fixture (one snmpsim per spec)


@pytest.mark.integration
@pytest.mark.parametrize("switch", ["eth-leaf-02", "eth-leaf-03", "eth-fault-garbage"])
def test_collector_rows_equal_snmpbulkwalk(snmp_site: Callable[..., SnmpSite], switch: str) -> None:
    site = snmp_site("h100-1su")
    walk = _ours(site, switch)
    assert walk.failure is None
    compared = 0
    for table in ("lldpLocalSystemData", "lldpRemTable", "lldpRemManAddrTable", "ifName", "ifHighSpeed",
                  "ifPhysAddress", "dot1dBasePortIfIndex"):
        theirs = _net_snmp(site, switch, dotted(WALK_BASES[table]))
        ours = {
            k: (("number", v[1]) if isinstance(v[1], int) else v) for k, v in walk.tables.get(table, {}).items()
        }
        assert ours == theirs, table
        compared += len(ours)
    assert compared > (20 if switch == "eth-fault-garbage" else 100)
