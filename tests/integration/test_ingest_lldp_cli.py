"""``gpufabric ingest lldp FILE --format F [--host NAME] [--json]`` run on every
shared capture (../shared/fixtures/vendor-lldp and snmprec, found by globbing), against this
session's warehouse: the rows it lands are the rows the live collectors' parse path gives for the
same bytes, its ``--json`` is exactly those neighbours, and broken or hostile files end in a clear
error or quarantined rows with their reasons -- never a traceback.

The ``snmpwalk -On`` format is tested with text rendered from one snmprec walk in net-snmp's
output syntax (no shared capture is in that format); it must land the same neighbours.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from connectors.ssh.parsers import MAX_OUTPUT_BYTES, parse_output
from connectors.ssh.platforms import CAPTURE_FORMATS, command_for
from core.lldp import LldpNeighbor
from pipelines.cli import app as cli_app
from tests.unit.test_vendor_lldp_captures import FORMAT_OF  # case folder (vendor, format) -> --format

pytestmark = [pytest.mark.integration, pytest.mark.warehouse_only]  # only Postgres of the site (tests/conftest.py)

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "fixtures"
CLI_CASES = sorted((SHARED / "vendor-lldp").glob("*/*/expected.yaml"))
WALKS = sorted((SHARED / "snmprec").glob("*.snmprec"))
KEYS = ("local_port", "remote_system_name", "remote_port_id", "remote_chassis_id")


def gpufabric(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,  # hang guard only
        env={**os.environ, "COLUMNS": "200"},
    )


def in_process(*args: str) -> subprocess.CompletedProcess[str]:
    """The same command through the CLI's own Typer app in this process: the whole command runs
    (parsing, landing, printing), without ~1.3 s of interpreter start per capture. What only a
    real process shows (exit codes, no traceback) is checked by the subprocess tests below."""
    result = CliRunner().invoke(cli_app, list(args), env={"COLUMNS": "200"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(["gpufabric", *args], result.exit_code, result.stdout, result.stderr)


def ingest(path: Path, fmt: str, host: str, *, run_as=in_process) -> tuple[str, subprocess.CompletedProcess[str]]:  # type: ignore[no-untyped-def]
    run = f"test-ingest-{uuid.uuid4().hex[:10]}"
    return run, run_as("ingest", "lldp", str(path), "--format", fmt, "--host", host, "--json", "--run-id", run)


def landed(warehouse: Any, run: str) -> list[tuple[Any, ...]]:
    with warehouse.connect() as conn:
        rows = conn.execute(
            "SELECT source, collector, local_port_num, rem_index, local_port_vendor, chassis_id_subtype, chassis_id,"
            " port_id_subtype, port_id, port_desc, sys_name FROM raw.lldp_neighbor_observations WHERE run_id = %s",
            (run,),
        ).fetchall()
    return sorted((tuple(r) for r in rows), key=repr)


def status_of(warehouse: Any, run: str) -> list[tuple[str, str, int, int]]:
    with warehouse.connect() as conn:
        rows = conn.execute(
            "SELECT device, status, rows_landed, rows_quarantined FROM ops.collection_status WHERE run_id = %s", (run,)
        ).fetchall()
    return [tuple(r) for r in rows]


def as_rows(host: str, collector: str, neighbors: list[LldpNeighbor]) -> list[tuple[Any, ...]]:
    return sorted(
        (
            (host, collector, n.local_port_num, n.rem_index, n.local_port_vendor, n.chassis_id_subtype, n.chassis_id,
             n.port_id_subtype, n.port_id, n.port_desc, n.sys_name)
            for n in neighbors
        ),
        key=repr,
    )  # fmt: skip


def as_json(neighbors: list[LldpNeighbor]) -> list[tuple[Any, ...]]:
    return sorted(((n.local_port_vendor, n.sys_name, n.port_id, n.chassis_id) for n in neighbors), key=repr)


def _cli_job(case: Path) -> tuple[Path, str, str]:
    expected = yaml.safe_load(case.read_text())
    return (
        case.parent / expected["raw_file"],
        FORMAT_OF[(expected["vendor"], expected["format"])],
        f"dut-{case.parent.name}",
    )


@pytest.fixture(scope="module")
def ingested(warehouse: Any) -> dict[Path, tuple[str, subprocess.CompletedProcess[str]]]:
    """Every shared capture ingested once through the CLI (in process: see ``in_process``)."""
    jobs = {case: _cli_job(case) for case in CLI_CASES}
    jobs.update({walk: (walk, "snmprec", walk.stem) for walk in WALKS})
    return {key: ingest(*job) for key, job in jobs.items()}


@pytest.mark.parametrize("case", CLI_CASES, ids=lambda p: "/".join(p.parent.parts[-2:]))
def test_ingest_cli_capture_lands_what_the_live_parser_gives(
    warehouse: Any, ingested: dict[Path, tuple[str, subprocess.CompletedProcess[str]]], case: Path
) -> None:
    expected = yaml.safe_load(case.read_text())
    raw, fmt, host = _cli_job(case)
    run, result = ingested[case]
    assert result.returncode == 0, result.stderr
    live = parse_output(raw.read_bytes(), command_for(*CAPTURE_FORMATS[fmt]), host).neighbors
    collector = "lldpctl" if CAPTURE_FORMATS[fmt][0] == "linux" else "cli"
    assert landed(warehouse, run) == as_rows(host, collector, live)
    printed = json.loads(result.stdout)
    assert all(set(KEYS) <= set(item) for item in printed)
    assert sorted((tuple(item[k] for k in KEYS) for item in printed), key=repr) == as_json(live)
    assert len(printed) == expected["neighbour_count"]
    assert sorted((i["local_port"], i["remote_system_name"]) for i in printed) == sorted(
        (n["local_interface"], n["remote_system_name"]) for n in expected["neighbours"]
    )
    assert status_of(warehouse, run) == [(host, "ok", expected["neighbour_count"], 0)]


@pytest.mark.parametrize("walk", WALKS, ids=lambda p: p.stem)
def test_ingest_snmprec_lands_every_expected_neighbour(
    warehouse: Any, ingested: dict[Path, tuple[str, subprocess.CompletedProcess[str]]], walk: Path
) -> None:
    expected = yaml.safe_load(walk.with_suffix(".expected.yaml").read_text())
    run, result = ingested[walk]
    assert result.returncode == 0, result.stderr
    rows = landed(warehouse, run)
    assert sorted((r[2], r[3], r[4], r[10]) for r in rows) == sorted(
        (n["index"]["local_port_num"], n["index"]["rem_index"], n["local_port"]["name"], n["sys_name"])
        for n in expected["neighbours"]
    )
    assert {r[:2] for r in rows} == {(walk.stem, "snmp")}
    printed = json.loads(result.stdout)
    assert len(printed) == expected["neighbour_count"]
    no_chassis = sum(1 for n in expected["neighbours"] if n["chassis_id"]["value"] is None)
    assert sum(1 for i in printed if i["remote_chassis_id"] is None) == no_chassis
    with warehouse.connect() as conn:
        (interfaces,) = conn.execute(
            "SELECT count(*) FROM raw.snmp_interfaces WHERE run_id = %s AND source = %s", (run, walk.stem)
        ).fetchone()
    assert interfaces > 0  # the interface table lands too, as in a live poll


@pytest.mark.parametrize("index", [0, -1], ids=["first-cli-capture", "last-snmprec-walk"])
def test_a_real_process_lands_and_prints_what_the_in_process_run_did(
    warehouse: Any, ingested: dict[Path, tuple[str, subprocess.CompletedProcess[str]]], index: int
) -> None:
    """The command as a user runs it (its own interpreter, its own settings load): same rows, same
    JSON, no traceback on stderr."""
    key = list(ingested)[index]
    job = _cli_job(key) if key.name == "expected.yaml" else (key, "snmprec", key.stem)
    run, result = ingest(*job, run_as=gpufabric)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    their_run, theirs = ingested[key]
    assert json.loads(result.stdout) == json.loads(theirs.stdout)
    ours = [r[2:] for r in landed(warehouse, run)]
    assert ours and ours == [r[2:] for r in landed(warehouse, their_run)]


def snmpwalk_text(snmprec: str) -> str:
    """net-snmp's ``snmpwalk -On`` rendering of an snmprec walk (STRING/Hex-STRING/INTEGER/...)."""
    out = []
    for line in snmprec.splitlines():
        oid, tag, value = line.strip().split("|", 2)
        if tag == "4x":
            raw = bytes.fromhex(value)
            text = raw.decode("utf-8", "replace")
            if raw and all(32 <= b < 127 or b in (10, 13) for b in raw):
                out.append(f'.{oid} = STRING: "{text}"')
            else:
                out.append(f".{oid} = Hex-STRING: " + " ".join(f"{b:02X}" for b in raw))
        elif tag == "4":
            out.append(f'.{oid} = STRING: "{value}"' if value else f'.{oid} = ""')
        elif tag == "2":
            out.append(f".{oid} = INTEGER: {value}")
        elif tag == "6":
            out.append(f".{oid} = OID: .{value}")
        elif tag in ("65", "66", "70"):
            kind = {"65": "Counter32", "66": "Gauge32", "70": "Counter64"}[tag]
            out.append(f".{oid} = {kind}: {value}")
        elif tag == "67":
            out.append(f".{oid} = Timeticks: ({value}) 0:00:00.00")
    return "\n".join(out) + "\n"


def test_ingest_snmpwalk_text_lands_the_same_neighbours_as_the_snmprec(
    warehouse: Any, ingested: dict[Path, tuple[str, subprocess.CompletedProcess[str]]], tmp_path: Path
) -> None:
    walk = SHARED / "snmprec" / "dnos_s4048.snmprec"  # MACs served as text, big OS9 ifIndexes
    text_file = tmp_path / "dnos_s4048.walk"
    text_file.write_text(snmpwalk_text(walk.read_text()))
    run_a, a = ingested[walk]
    run_b, b = ingest(text_file, "snmpwalk", walk.stem)
    assert a.returncode == 0 and b.returncode == 0, b.stderr
    assert [r[2:] for r in landed(warehouse, run_b)] == [r[2:] for r in landed(warehouse, run_a)]
    assert json.loads(b.stdout) == json.loads(a.stdout)


# ------------------------------------------------------------------------------------------------
# bad input: a clear error or quarantined rows with reasons, never a traceback
# ------------------------------------------------------------------------------------------------


def test_unknown_format_lists_the_known_ones(tmp_path: Path) -> None:
    f = tmp_path / "x.json"
    f.write_text("{}")
    result = gpufabric("ingest", "lldp", str(f), "--format", "csv")
    assert result.returncode == 2
    assert "unknown capture format 'csv'; known formats: eos-json, nxos-json, junos-json, junos-xml" in result.stderr
    assert "snmprec, snmpwalk" in result.stderr and "Traceback" not in result.stderr


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    result = gpufabric("ingest", "lldp", str(tmp_path / "nope.json"), "--format", "eos-json")
    assert result.returncode == 1
    assert f"error: cannot read {tmp_path / 'nope.json'}: No such file or directory" in result.stderr
    assert "Traceback" not in result.stderr


CLI_EOS = SHARED / "vendor-lldp/arista_eos/napalm-detail-41-neighbours/show_lldp_neighbors__detail.json"


@pytest.mark.parametrize(
    ("fmt", "content", "reason"),
    [
        ("eos-json", CLI_EOS.read_bytes()[:5000], "unparseable 'show lldp neighbors detail | json' output: not JSON"),
        ("junos-xml", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "binary output: not UTF-8 at byte"),
        ("iosxr-xml", b'<!DOCTYPE x [<!ENTITY a "aaaa">]><Response>&a;</Response>', "DOCTYPE/ENTITY declaration"),
        ("nxos-json", b"x" * (MAX_OUTPUT_BYTES + 1), f"bytes exceeds the {MAX_OUTPUT_BYTES}-byte limit"),
        ("snmprec", b"1.3.6.1.2.1.1.5.0|4|sw\n1.0.8802.1.1.2.1.4.1.1.4.0.1|2|zz\n", "type 2: 'zz' is not a number"),
        ("snmpwalk", b"hello world\n", "no varbind of the system group"),
        ("cumulus-json", b'{"lldp": [{"interface": [{"chassis": []}]}]}', "it names no interface"),
    ],
    ids=["truncated-json", "binary", "xml-entities", "huge", "snmprec-bad-value", "snmpwalk-garbage", "json0-no-name"],
)
def test_broken_capture_is_quarantined_with_its_reason(
    warehouse: Any, tmp_path: Path, fmt: str, content: bytes, reason: str
) -> None:
    f = tmp_path / "capture"
    f.write_bytes(content)
    run, result = ingest(f, fmt, "broken")
    assert "Traceback" not in result.stderr
    assert reason in result.stderr
    assert json.loads(result.stdout) == []
    with warehouse.connect() as conn:
        reasons = [r for (r,) in conn.execute("SELECT reason FROM ops.quarantine WHERE run_id = %s", (run,))]
    assert reasons and any(reason in r for r in reasons)
    (row,) = status_of(warehouse, run)
    assert (result.returncode, row[1], row[2]) == (1, "invalid", 0)
