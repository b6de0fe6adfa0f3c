"""SNMP LLDP collection: our collector against net-snmp ``snmpbulkwalk``, same responder, same run.

N simulated switches (48 ports, one LLDP neighbour per port) are served by one snmpsim process
(data-file cache raised above N). Both tools walk the same subtrees of every switch with the same
concurrency (default 30, near where snmpsim stops scaling) and the same max-repetitions:

* ours: ``connectors.snmp.collect`` (SNMPv2c fast path: our BER codec on one socket), interpretation
  included; and the same collector with ``v2c_fast_path=False`` (pysnmp 7 asyncio, one engine), the
  path SNMPv3 switches take, for the before/after CPU in one run;
* peer: one ``sh`` per switch running ``snmpbulkwalk`` once per subtree (process start included).

Every tool runs once per round (``--rounds``, default 3) against the same snmpsim, the order
rotating from round to round so that none always goes first. Printed per N: switches/s for each
(median, min .. max over the rounds), the per-round ratio of wall times (ours / net-snmp) with its
spread, and our collector thread's CPU seconds per switch (what decides how many real switches, which answer far faster
than snmpsim, one core can poll per minute). snmpsim is the ceiling for both tools on this
machine (~15-20 agents/s, pure-Python SNMP on 2 cores shared with the client), so wall figures
say "responder-bound" whenever the ratio is near 1.

``python -m bench --only snmp [--quick] [-- --sizes 64,256 --concurrency 30]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import SecretStr

from bench.common import Spread, ratio_line, rotation
from connectors.snmp import CollectionStats, CollectorOptions, SnmpTarget, collect
from connectors.snmp.oids import INTERFACE_WALKS, V1_WALKS, dotted
from core.quality import CollectionStatus
from simulator.snmp.records import (
    AGENT_STYLES,
    DOT1D_BASE_PORT_IF_INDEX,
    IF_TABLE,
    IFX_TABLE,
    LLDP_LOC,
    LLDP_REM,
    LLDP_REM_MAN,
    render,
)
from simulator.snmp.twin import SnmpTwinOptions, launch, stop

PORTS = 48


def switch_records(i: int) -> list[tuple[str, str, str]]:
    """One 48-port Cumulus-style switch with a host neighbour on every port."""
    style = AGENT_STYLES["cumulus"]
    name = f"sw{i:04d}"
    chassis = (0x1C34DA000000 + i * 256).to_bytes(6, "big").hex()
    rows = [
        ("1.3.6.1.2.1.1.1.0", "4", style.sys_descr),
        ("1.3.6.1.2.1.1.2.0", "6", style.sys_object_id),
        ("1.3.6.1.2.1.1.5.0", "4", name),
        (f"{LLDP_LOC}.1.0", "2", "4"),
        (f"{LLDP_LOC}.2.0", "4x", chassis),
        (f"{LLDP_LOC}.3.0", "4", name),
        (f"{LLDP_LOC}.4.0", "4", style.sys_descr),
    ]
    for k in range(1, PORTS + 1):
        idx = k + 2
        host = (0xB49691000000 + i * 64 + k).to_bytes(6, "big").hex()
        key = f"{1000 + k}.{idx}.{k + 7}"
        rows += [
            (f"{IF_TABLE}.2.{idx}", "4", f"swp{k}"),
            (f"{IF_TABLE}.6.{idx}", "4x", chassis),
            (f"{IFX_TABLE}.1.{idx}", "4", f"swp{k}"),
            (f"{IFX_TABLE}.15.{idx}", "66", "100000"),
            (f"{IFX_TABLE}.18.{idx}", "4", f"host{k}:eno1"),
            (f"{DOT1D_BASE_PORT_IF_INDEX}.{k}", "2", str(idx)),
            (f"{LLDP_LOC}.7.1.2.{idx}", "2", "5"),
            (f"{LLDP_LOC}.7.1.3.{idx}", "4", f"swp{k}"),
            (f"{LLDP_LOC}.7.1.4.{idx}", "4", f"host{k}:eno1"),
            (f"{LLDP_REM}.4.{key}", "2", "4"),
            (f"{LLDP_REM}.5.{key}", "4x", host),
            (f"{LLDP_REM}.6.{key}", "2", "3"),
            (f"{LLDP_REM}.7.{key}", "4x", host),
            (f"{LLDP_REM}.8.{key}", "4", "eno1"),
            (f"{LLDP_REM}.9.{key}", "4", f"host{i:04d}{k:02d}"),
            (f"{LLDP_REM}.10.{key}", "4", "Ubuntu 22.04.4 LTS Linux 5.15.0-105-generic x86_64"),
            (f"{LLDP_REM_MAN}.3.{key}.1.4.10.0.{i % 250}.{k}", "2", "2"),
        ]
    return rows


def _netsnmp(names: list[str], port: int, concurrency: int, repetitions: int) -> float:
    bases = [dotted(base) for _, base in (*V1_WALKS, *INTERFACE_WALKS)]

    def one(name: str) -> None:
        script = "; ".join(
            f"snmpbulkwalk -v2c -c {name} -On -Cr{repetitions} -t 10 -r 2 127.0.0.1:{port} {b} >/dev/null"
            for b in ["1.3.6.1.2.1.1", *bases]
        )
        subprocess.run(["sh", "-c", script], check=True, timeout=600)

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, names))
    return time.perf_counter() - started


def _ours(
    names: list[str], port: int, concurrency: int, repetitions: int, fast: bool = True
) -> tuple[float, CollectionStats]:
    targets = [
        SnmpTarget(
            name=n, address="127.0.0.1", port=port, community=SecretStr(n), timeout_s=10, retries=2, platform="cumulus"
        )
        for n in names
    ]
    stats = CollectionStats()
    started = time.perf_counter()
    options = CollectorOptions(concurrency=concurrency, max_repetitions=repetitions, v2c_fast_path=fast)
    results = list(collect(targets, options, stats))
    wall = time.perf_counter() - started
    bad = [r for r in results if r.status is not CollectionStatus.OK or len(r.neighbors) != PORTS]
    if bad:
        raise RuntimeError(f"{len(bad)} switches not fully collected, e.g. {bad[0].device}: {bad[0].detail}")
    return wall, stats


def run_size(n: int, concurrency: int, repetitions: int, workdir: Path, rounds: int) -> dict[str, object]:
    """Boot one snmpsim for N switches, then ``rounds`` rounds of every tool, the order rotating."""
    data = workdir / f"data-{n}"
    data.mkdir()
    for i in range(n):
        (data / f"sw{i:04d}.snmprec").write_text(render(switch_records(i)))
    started = time.perf_counter()
    pid, port = launch(data, workdir / f"run-{n}", SnmpTwinOptions(open_files=n + 64, ready_timeout_s=900), "sw0000")
    boot = time.perf_counter() - started
    names = [f"sw{i:04d}" for i in range(n)]
    walls: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    cpus: dict[str, list[float]] = {"ours": [], "slow": []}
    last: CollectionStats | None = None
    try:
        _ours(names[: min(n, 8)], port, concurrency, repetitions)  # warm snmpsim's caches for every tool
        for k in range(rounds):
            for name in rotation(list(CONTENDERS), k):
                if name == "peer":
                    walls["peer"].append(_netsnmp(names, port, concurrency, repetitions))
                    continue
                wall, stats = _ours(names, port, concurrency, repetitions, fast=name == "ours")
                walls[name].append(wall)
                cpus[name].append(stats.cpu_s)
                if name == "ours":
                    last = stats
            print(
                f"  N={n} round {k + 1} ({' -> '.join(rotation(list(CONTENDERS), k))}): "
                + ", ".join(f"{CONTENDERS[c]} {walls[c][-1]:.1f}s" for c in CONTENDERS),
                flush=True,
            )
    finally:
        stop(pid)
    assert last is not None
    return {"n": n, "boot": boot, "walls": walls, "cpus": cpus, "varbinds": last.varbinds, "requests": last.requests}


CONTENDERS = {"ours": "ours (v2c fast)", "slow": "ours via pysnmp", "peer": "net-snmp"}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench_snmp")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sizes", default=None, help="comma-separated switch counts (default 64,256,1024)")
    parser.add_argument("--concurrency", type=int, default=30)
    parser.add_argument("--max-repetitions", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=None, help="rounds per size, order rotating (default 3)")
    args = parser.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")] if args.sizes else ([64] if args.quick else [64, 256, 1024])
    rounds = args.rounds or (2 if args.quick else 3)
    if shutil.which("snmpbulkwalk") is None:
        print("snmpbulkwalk not found (Debian package snmp, system-packages/snmp.txt)")
        return 1
    print(
        f"  {PORTS}-port switches, concurrency {args.concurrency}, max-repetitions {args.max_repetitions}, "
        f"{rounds} rounds per size (order rotating), {os.cpu_count()} cores"
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-snmp-") as tmp:
        for n in sizes:
            r = run_size(n, args.concurrency, args.max_repetitions, Path(tmp), rounds)
            rows.append(r)
            print(
                f"  N={n}: snmpsim up in {r['boot']:.1f}s; {r['varbinds']} varbinds in {r['requests']} requests",
                flush=True,
            )
    print()
    for r in rows:
        count = int(r["n"])  # type: ignore[call-overload]
        walls: dict[str, list[float]] = r["walls"]  # type: ignore[assignment]
        cpus: dict[str, list[float]] = r["cpus"]  # type: ignore[assignment]
        print(f"  N={count} switches")
        for key, label in CONTENDERS.items():
            rate = Spread.of([count / w for w in walls[key]])
            line = f"    {label:>16}: {rate.fmt('.1f', ' sw/s')}"
            if key in cpus:
                line += f"; CPU {Spread.of([1000 * c / count for c in cpus[key]]).fmt('.1f', ' ms/switch')}"
            print(line)
        for key in ("ours", "slow"):
            print(f"    {ratio_line(f'wall {CONTENDERS[key]} / net-snmp', walls[key], walls['peer'])}")
        cpu_ms = statistics.median(1000 * c / count for c in cpus["ours"])
        print(f"    1000 switches on 1 core at the median CPU: {cpu_ms:.0f} s")
    print("  wall: every tool is bound by snmpsim (pure-Python responder on the same 2 cores);")
    print("  CPU: the collector thread's own time (walk + decode + interpretation), per 48-port switch;")
    print("  'via pysnmp' is the same collector with v2c_fast_path=False (the pysnmp path SNMPv3 uses).")
    return 0
