"""connectors.dcim.parser: DCIM inventory exports (CSV, YAML) to records, bad rows to quarantine.

The brief's rule is checked row by row: bad input never raises (except a whole-file
``DcimFormatError``) and is never silently dropped — every non-blank data line becomes a record
or exactly one quarantined item carrying the raw line, its location and a reason that says what
is wrong. The simulator's exports are the ground truth for the happy path.
"""

from __future__ import annotations

import csv
import random
from collections import Counter
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors.dcim.parser import (
    MAX_FIELD,
    MAX_LINE,
    SOURCE,
    DcimFormatError,
    DcimRecord,
    Hca,
    parse_csv,
    parse_file,
    parse_yaml,
)
from core.quality import MAX_QUARANTINE_PAYLOAD, Parsed, Quarantined
from simulator.dcim import write_dcim_export
from simulator.generator import DcimRecord as TruthRecord
from simulator.generator import DefectKind, GroundTruth, generate
from simulator.spec import ClusterSpec, load_spec

SPEC_DIR = Path(__file__).resolve().parents[2] / "simulator" / "specs"

# The header most hand-written cases use; 7 columns.
HEADER = "node,rack,gpu_count,hca_count,hcas,bmc_address,serial"
GUID0 = "0xb83fd20300000001"
GUID1 = "0xb83fd20300000002"


def lines_of(text: str | bytes) -> list[bytes]:
    """Physical lines as a binary file yields them: split after each LF (a bare CR is data)."""
    data = text.encode() if isinstance(text, str) else text
    parts = data.split(b"\n")
    out = [p + b"\n" for p in parts[:-1]]
    return [*out, parts[-1]] if parts[-1] else out


def parse(text: str | bytes) -> Parsed[DcimRecord]:
    return parse_csv(lines_of(text), device="dc1-export")


def where(parsed: Parsed[DcimRecord]) -> list[tuple[str | None, str]]:
    return [(q.location, q.reason) for q in parsed.quarantined]


# --- 1. round trip against the simulator ---------------------------------------------------------


@cache
def truth_of(name: str) -> GroundTruth:
    if name == "h100-4su+dcim-defects":
        data = load_spec(SPEC_DIR / "h100-4su.yaml").model_dump()
        data["defects"] = {"dcim_extra_hosts": 3, "dcim_missing_hosts": 4}
        return generate(ClusterSpec.model_validate(data))
    return generate(load_spec(SPEC_DIR / f"{name}.yaml"))


def as_expected(r: TruthRecord) -> dict[str, Any]:
    return {
        "rack": r.rack,
        "role": r.role,
        "su": r.su or None,  # an empty cell is "not given"; spare (extra) hosts have no SU
        "gpu_model": r.gpu_model,
        "gpu_count": r.gpu_count,
        "hca_count": r.hca_count,
        "hcas": tuple(Hca(h.name, h.rail, h.guid) for h in r.hcas),
        "bmc_address": r.bmc_address,
        "serial": r.serial,
        "extra": {},
    }


def as_parsed(r: DcimRecord) -> dict[str, Any]:
    return {
        "rack": r.rack,
        "role": r.role,
        "su": r.su,
        "gpu_model": r.gpu_model,
        "gpu_count": r.gpu_count,
        "hca_count": r.hca_count,
        "hcas": r.hcas,
        "bmc_address": r.bmc_address,
        "serial": r.serial,
        "extra": r.extra,
    }


SPECS = ["h100-4su", "gb200-nvl72", "h100-4su+dcim-defects"]


@pytest.mark.parametrize("fmt", ["csv", "yaml"])
@pytest.mark.parametrize("name", SPECS)
def test_simulator_export_parses_to_exactly_the_truth(name: str, fmt: str, tmp_path: Path) -> None:
    truth = truth_of(name)
    path = write_dcim_export(truth, tmp_path / f"export.{fmt}", fmt)  # type: ignore[arg-type]
    parsed = parse_file(path, device="sim")
    assert parsed.quarantined == []
    want = {r.node: as_expected(r) for r in truth.dcim}
    got = {r.node: as_parsed(r) for r in parsed.records}
    assert got.keys() == want.keys()
    assert got == want
    # file order (the export sorts by rack then node), and CSV line numbers after the header
    in_file_order = [r.node for r in sorted(truth.dcim, key=lambda r: (r.rack, r.node))]
    assert [r.node for r in parsed.records] == in_file_order
    expected_lines: list[int | None] = list(range(2, len(in_file_order) + 2))
    if fmt == "yaml":
        expected_lines = [None] * len(in_file_order)
    assert [r.line for r in parsed.records] == expected_lines


def test_round_trip_counts_and_defects_are_what_the_specs_say() -> None:
    # Guards the round trip above against comparing two empty sets.
    assert len(truth_of("h100-4su").dcim) == 128
    # 144 GPU trays and the spec's two UFM servers (service hosts, 2 HCAs each)
    assert len(truth_of("gb200-nvl72").dcim) == 146
    assert {len(r.hcas) for r in truth_of("gb200-nvl72").dcim if r.role == "compute"} == {4}
    assert sorted(len(r.hcas) for r in truth_of("gb200-nvl72").dcim if r.role != "compute") == [2, 2]
    dirty = truth_of("h100-4su+dcim-defects")
    extra = {h for d in dirty.defects_of(DefectKind.DCIM_EXTRA_HOST) for h in d.hosts}
    missing = {h for d in dirty.defects_of(DefectKind.DCIM_MISSING_HOST) for h in d.hosts}
    assert len(extra) == 3 and len(missing) == 4
    nodes = {r.node for r in dirty.dcim}
    assert extra <= nodes and not (missing & nodes)
    assert len(nodes) == 128 - 4 + 3


def test_csv_from_an_open_file_and_from_arbitrary_chunks_agree(tmp_path: Path) -> None:
    path = write_dcim_export(truth_of("gb200-nvl72"), tmp_path / "export.csv", "csv")
    with path.open("rb") as handle:
        from_handle = parse_csv(handle)
    data = path.read_bytes()
    rng = random.Random(7)
    chunks, i = [], 0
    while i < len(data):
        n = rng.randint(1, 300)
        chunks.append(data[i : i + n])
        i += n
    from_chunks = parse_csv(iter(chunks))
    assert from_chunks == from_handle
    assert len(from_handle.records) == 146 and from_handle.quarantined == []
    # even the whole file as one bytes object
    assert parse_csv([data]) == from_handle


# --- 2. header variants -------------------------------------------------------------------------


def test_header_aliases_fold_to_our_fields() -> None:
    text = (
        "Hostname,Cabinet,Device Role,Scalable-Unit,GPU Type,Num GPUs,HCAs Count,HCA List,BMC IP,Serial Number\n"
        f"DGX-A01,r07,compute,su02,H100-SXM5-80GB,8,2,mlx5_0:rail0:0x{GUID0[2:].upper()};"
        f"mlx5_1:rail1:{GUID1},10.128.0.10,0012345670\n"
    )
    parsed = parse(text)
    assert parsed.quarantined == []
    assert parsed.records == [
        DcimRecord(
            node="dgx-a01",  # hostnames are case-insensitive: lower-cased like Kubernetes node names
            rack="r07",
            role="compute",
            su="su02",
            gpu_model="H100-SXM5-80GB",
            gpu_count=8,
            hca_count=2,
            hcas=(Hca("mlx5_0", 0, GUID0), Hca("mlx5_1", 1, GUID1)),  # GUIDs lower-cased
            bmc_address="10.128.0.10",
            serial="0012345670",  # leading zeros kept: serials are text
            extra={},
            line=2,
        )
    ]


@pytest.mark.parametrize(
    ("header", "cell", "field", "value"),
    [
        ("host", "N1", "node", "n1"),
        ("Device Name", "n1", "node", "n1"),
        ("NAME", "n1", "node", "n1"),
        ("node-name", "n1", "node", "n1"),
        ("Location", "x", "rack", "x"),
        ("rack name", "x", "rack", "x"),
        ("pod", "x", "su", "x"),
        ("gpu", "x", "gpu_model", "x"),
        ("GPUs", "4", "gpu_count", 4),
        ("num_hcas", " 4 ", "hca_count", 4),
        ("hca", "mlx5_0", "hcas", (Hca("mlx5_0", None, None),)),
        ("OOB IP", "fd00::1", "bmc_address", "fd00::1"),
        ("ipmi", "10.0.0.1", "bmc_address", "10.0.0.1"),
        ("BMC", "10.0.0.1", "bmc_address", "10.0.0.1"),
        ("asset serial", "x", "serial", "x"),
    ],
)
def test_each_alias(header: str, cell: str, field: str, value: Any) -> None:
    text = f"{header}\n{cell}\n" if field == "node" else f"node,{header}\nn1,{cell}\n"
    parsed = parse(text)
    assert parsed.quarantined == []
    (record,) = parsed.records
    assert getattr(record, field) == value
    assert record.extra == {}


def test_bom_and_crlf() -> None:
    text = b"\xef\xbb\xbfnode,rack,serial\r\nn1,r1,S1\r\nn2,r2,S2\r\n"
    parsed = parse(text)
    assert [(r.node, r.rack, r.serial, r.line) for r in parsed.records] == [
        ("n1", "r1", "S1", 2),
        ("n2", "r2", "S2", 3),
    ]
    assert parsed.quarantined == []


def test_bom_before_a_quoted_header() -> None:
    parsed = parse(b'\xef\xbb\xbf"node","rack"\r\n"n1","r1"\r\n')
    assert [(r.node, r.rack) for r in parsed.records] == [("n1", "r1")]


def test_unknown_columns_are_kept_in_extra_never_dropped() -> None:
    text = (
        "node,Owner,Notes,notes,,Hostname\n"
        "n1,team-a,first,second,orphan,other-name\n"
        "n2,,,,,\n"  # blank extras: nothing to keep
    )
    parsed = parse(text)
    assert parsed.quarantined == []
    assert [r.extra for r in parsed.records] == [
        {
            "Owner": "team-a",
            "Notes": "first",
            "notes": "second",  # a different header, not a duplicate
            "column 5": "orphan",  # an unnamed column gets a name instead of being lost
            "Hostname": "other-name",  # a second node column: the first one wins, this one is kept
        },
        {},
    ]


def test_duplicate_header_names_do_not_overwrite_each_other() -> None:
    parsed = parse("node,tag,tag,tag\nn1,a,b,c\n")
    assert parsed.records[0].extra == {"tag": "a", "tag (2)": "b", "tag (3)": "c"}


def test_a_blank_node_column_falls_back_to_the_next_node_alias() -> None:
    parsed = parse("node,hostname\n,n7\n")
    assert [(r.node, r.extra) for r in parsed.records] == [("n7", {})]


def test_blank_lines_are_skipped_and_line_numbers_stay_physical() -> None:
    text = "\n  \n" + HEADER + "\n\nn1,r1,8,,,,\n   \n,,,,,,\n\r\nn2,r1,8,,,,\n\n"
    parsed = parse(text)
    assert [(r.node, r.line) for r in parsed.records] == [("n1", 5), ("n2", 9)]
    assert parsed.quarantined == []


def test_header_with_undecodable_bytes_keeps_the_column_under_an_escaped_name() -> None:
    parsed = parse(b"node,r\xe9gion\nn1,eu\n")
    assert parsed.records[0].extra == {"r\\xe9gion": "eu"}


def test_a_legitimate_multi_line_cell_in_an_extra_column_is_one_record() -> None:
    parsed = parse('node,notes,rack\nn1,"line one\nline two",r1\nn2,,r2\n')
    assert [(r.node, r.extra, r.rack, r.line) for r in parsed.records] == [
        ("n1", {"notes": "line one\nline two"}, "r1", 2),
        ("n2", {}, "r2", 4),
    ]
    assert parsed.quarantined == []


# --- 3. bad rows ---------------------------------------------------------------------------------

GOOD_1 = f"good-1,r1,8,2,mlx5_0:rail0:{GUID0};mlx5_1:rail1:{GUID1},10.0.0.1,S1"
GOOD_2 = "good-2,r1,8,,,10.0.0.2,S2"

BAD_ROWS = [
    pytest.param(",r1,8,,,10.0.0.9,S9", "node name is empty", id="empty-node"),
    pytest.param("   ,r1,8,,,10.0.0.9,S9", "node name is empty", id="whitespace-node"),
    pytest.param("bad_host!,r1,8,,,,", "node name 'bad_host!' is not a valid hostname", id="invalid-hostname"),
    pytest.param("-lead,r1,8,,,,", "node name '-lead' is not a valid hostname", id="hostname-leading-dash"),
    pytest.param(
        "a" * 64 + ",r1,8,,,,", f"node name '{'a' * 64}' is not a valid hostname", id="hostname-label-too-long"
    ),
    pytest.param("n9,r1,eight,,,,", "gpu_count must be a whole number, got 'eight'", id="gpu-count-word"),
    pytest.param("n9,r1,8.0,,,,", "gpu_count must be a whole number, got '8.0'", id="gpu-count-float"),
    pytest.param("n9,r1,\u0668,,,,", "gpu_count must be a whole number, got '\u0668'", id="gpu-count-arabic-digit"),
    pytest.param("n9,r1,-1,,,,", "gpu_count must be between 0 and 1024, got -1", id="gpu-count-negative"),
    pytest.param("n9,r1,1025,,,,", "gpu_count must be between 0 and 1024, got 1025", id="gpu-count-too-big"),
    pytest.param(
        "n9,r1," + "9" * 5000 + ",,,,",
        "gpu_count must be between 0 and 1024, got " + "9" * 40,
        id="gpu-count-huge",
    ),
    pytest.param("n9,r1,8,x,,,", "hca_count must be a whole number, got 'x'", id="hca-count-word"),
    pytest.param("n9,r1,8,,,10.0.0.256,", "bmc_address '10.0.0.256' is not an IP address", id="ip-octet"),
    pytest.param("n9,r1,8,,,not-an-ip,", "bmc_address 'not-an-ip' is not an IP address", id="ip-word"),
    pytest.param("n9,r1,8,,,10.0.0.1/24,", "bmc_address '10.0.0.1/24' is not an IP address", id="ip-cidr"),
    pytest.param(
        "n9,r1,8,,mlx5_0:railX,,", "hcas entry 'mlx5_0:railX' is not name[:railN][:0x<16 hex>]", id="hcas-rail"
    ),
    pytest.param(
        "n9,r1,8,,mlx5_0:rail0:0x1234,,",
        "hcas entry 'mlx5_0:rail0:0x1234' is not name[:railN][:0x<16 hex>]",
        id="hcas-short-guid",
    ),
    pytest.param("n9,r1,8,,mlx5 0,,", "hcas entry 'mlx5 0' is not name[:railN][:0x<16 hex>]", id="hcas-space-in-name"),
    pytest.param(
        f"n9,r1,8,3,mlx5_0:rail0:{GUID0};mlx5_1:rail1:{GUID1},,",
        "hca_count says 3 but 2 HCAs are listed",
        id="hca-count-disagrees",
    ),
    pytest.param("n9,r1,8", "row has 3 cells, header has 7", id="too-few-cells"),
    pytest.param("n9,r1,8,,,,,extra", "row has 8 cells, header has 7", id="too-many-cells"),
    pytest.param("n9,r\t1,8,,,,", "rack 'r\\t1' contains a control character (U+0009)", id="control-char"),
    pytest.param("n9,r1,8,,,,S\x009", "row contains a NUL byte", id="nul-byte"),
    pytest.param("n\x009,r1,8,,,,", "row contains a NUL byte", id="nul-in-node"),
    pytest.param('n9,"r"1,8,,,,', "malformed CSV: ',' expected after '\"'", id="text-after-closing-quote"),
    pytest.param(
        "n9,r1,8,,,," + "x" * (MAX_FIELD + 1), f"a field is longer than {MAX_FIELD} characters", id="big-cell"
    ),
]


@pytest.mark.parametrize(("row", "reason"), BAD_ROWS)
def test_a_bad_row_is_quarantined_with_its_reason_and_the_good_rows_land(row: str, reason: str) -> None:
    parsed = parse(f"{HEADER}\n{GOOD_1}\n{row}\n{GOOD_2}\n")
    assert [(r.node, r.line) for r in parsed.records] == [("good-1", 2), ("good-2", 4)]
    assert where(parsed) == [("line 3", reason)]
    (q,) = parsed.quarantined
    assert q == Quarantined(source=SOURCE, reason=reason, payload=row, device="dc1-export", location="line 3")
    assert q.clipped_payload() == (row[:MAX_QUARANTINE_PAYLOAD], None)


def test_the_good_row_around_bad_ones_is_parsed_completely() -> None:
    parsed = parse(f"{HEADER}\n{GOOD_1}\n")
    assert parsed.records == [
        DcimRecord(
            node="good-1",
            rack="r1",
            gpu_count=8,
            hca_count=2,
            hcas=(Hca("mlx5_0", 0, GUID0), Hca("mlx5_1", 1, GUID1)),
            bmc_address="10.0.0.1",
            serial="S1",
            line=2,
        )
    ]


def test_ipv6_bmc_is_normalised() -> None:
    (record,) = parse("node,bmc\nn1,FD00:0:0::0A\n").records
    assert record.bmc_address == "fd00::a"


def test_duplicate_node_keeps_the_first_row() -> None:
    text = f"{HEADER}\n{GOOD_1}\n{GOOD_2}\nGOOD-1,r9,4,,,10.0.0.9,S9\ngood-1,r8,4,,,,\n"
    parsed = parse(text)
    assert [(r.node, r.rack, r.serial) for r in parsed.records] == [("good-1", "r1", "S1"), ("good-2", "r1", "S2")]
    assert where(parsed) == [
        ("line 4", "duplicate node 'good-1' (first at line 2); first row kept"),
        ("line 5", "duplicate node 'good-1' (first at line 2); first row kept"),
    ]
    assert [q.payload for q in parsed.quarantined] == ["GOOD-1,r9,4,,,10.0.0.9,S9", "good-1,r8,4,,,,"]


def test_a_rejected_row_does_not_claim_its_node_name() -> None:
    parsed = parse(f"{HEADER}\ngood-1,r1,eight,,,,\n{GOOD_1}\n")
    assert [(r.node, r.line) for r in parsed.records] == [("good-1", 3)]
    assert where(parsed) == [("line 2", "gpu_count must be a whole number, got 'eight'")]


def test_truncated_file_last_row_cut_mid_way() -> None:
    cut = "n5,r2,8,2,mlx5_0:rai"
    parsed = parse(f"{HEADER}\n{GOOD_1}\n{GOOD_2}\n{cut}")  # no final newline: the file just stops
    assert [r.node for r in parsed.records] == ["good-1", "good-2"]
    assert where(parsed) == [("line 4", "row has 5 cells, header has 7")]
    assert parsed.quarantined[0].payload == cut


def test_truncated_file_cut_inside_a_quoted_cell() -> None:
    cut = 'n5,r2,8,,,,"S12'
    parsed = parse(f"{HEADER}\n{GOOD_1}\n{cut}")
    assert [r.node for r in parsed.records] == ["good-1"]
    # csv's default (non-strict) mode would have accepted serial "S12" as if the quote were closed
    assert where(parsed) == [("line 3", "malformed CSV: unexpected end of data")]
    assert parsed.quarantined[0].payload == cut


def test_an_unterminated_quote_does_not_swallow_the_rest_of_the_file() -> None:
    bad = 'n3,"r1,8,,,,S3'
    text = f"{HEADER}\n{GOOD_1}\n{bad}\n{GOOD_2}\ngood-4,r2,4,,,,S4\n"
    parsed = parse(text)
    assert [(r.node, r.line, r.serial) for r in parsed.records] == [
        ("good-1", 2, "S1"),
        ("good-2", 4, "S2"),
        ("good-4", 5, "S4"),
    ]
    assert where(parsed) == [
        (
            "line 3",
            "malformed CSV: unexpected end of data (the record runs from line 3 to line 5 inside a quoted field;"
            " only its first line is quarantined, the following lines are read again as rows)",
        )
    ]
    assert parsed.quarantined[0].payload == bad


def test_an_unterminated_quote_closed_by_a_later_quote_still_lets_the_lines_between_land() -> None:
    # The stray quote on line 2 meets the quote on line 4; the record that csv sees (lines 2-4)
    # is rejected, so only line 2 is quarantined and lines 3-4 are read again.
    text = f'{HEADER}\nn2,"r1,8,,,,S2\n{GOOD_2}\ngood-4,r1,8,,,,"S4"\n'
    parsed = parse(text)
    assert [(r.node, r.line, r.serial) for r in parsed.records] == [("good-2", 3, "S2"), ("good-4", 4, "S4")]
    assert [q.location for q in parsed.quarantined] == ["line 2"]
    assert parsed.quarantined[0].reason.startswith("malformed CSV: ',' expected after '\"'")


def test_a_multi_line_record_that_is_invalid_is_read_again_line_by_line() -> None:
    # Lines 2-3 form one csv record (quoted newline in the rack), which makes a bad rack: only the
    # first line is quarantined; line 3 is then a row of its own (and a bad one).
    parsed = parse(f'{HEADER}\nn3,"r1\nr2",8,,,,S3\n{GOOD_2}\n')
    assert [(r.node, r.line) for r in parsed.records] == [("good-2", 4)]
    assert [(q.location, q.payload) for q in parsed.quarantined] == [
        ("line 2", 'n3,"r1'),
        ("line 3", 'r2",8,,,,S3'),
    ]
    assert parsed.quarantined[0].reason == (
        "rack 'r1\\nr2' contains a control character (U+000A) (the record runs from line 2 to line 3 inside a"
        " quoted field; only its first line is quarantined, the following lines are read again as rows)"
    )
    assert parsed.quarantined[1].reason == "row has 6 cells, header has 7"  # a mid-cell quote is literal


def test_non_utf8_row_is_quarantined_with_its_raw_bytes_recoverable() -> None:
    raw = b"n3,r\xe9\xff,8,,,,S3"
    data = f"{HEADER}\n{GOOD_1}\n".encode() + raw + b"\r\n" + f"{GOOD_2}\n".encode()
    parsed = parse(data)
    assert [(r.node, r.line) for r in parsed.records] == [("good-1", 2), ("good-2", 4)]
    assert where(parsed) == [("line 3", "row is not valid UTF-8")]
    (q,) = parsed.quarantined
    assert q.payload == raw
    assert q.clipped_payload() == ("n3,r\\xe9\\xff,8,,,,S3", raw)


def test_non_utf8_row_with_a_structural_problem_still_keeps_its_bytes() -> None:
    parsed = parse(f"{HEADER}\n".encode() + b"n3,\xff\n")
    assert where(parsed) == [("line 2", "row has 2 cells, header has 7")]
    assert parsed.quarantined[0].clipped_payload() == ("n3,\\xff", b"n3,\xff")


def test_a_cell_over_the_csv_field_limit() -> None:
    row = "n9,r1,8,,,," + "x" * 200_000
    parsed = parse(f"{HEADER}\n{GOOD_1}\n{row}\n{GOOD_2}\n")
    assert [r.node for r in parsed.records] == ["good-1", "good-2"]
    assert [q.location for q in parsed.quarantined] == ["line 3"]
    assert parsed.quarantined[0].reason.startswith("malformed CSV: field larger than field limit")
    assert parsed.quarantined[0].payload == row
    assert parsed.quarantined[0].clipped_payload()[0] == row[:MAX_QUARANTINE_PAYLOAD]


def test_an_over_long_line_is_quarantined_without_being_held_whole(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    length = 3 * MAX_LINE
    with path.open("wb") as fh:
        fh.write(f"{HEADER}\n{GOOD_1}\n".encode())
        fh.write(b"n9,r1,8,,,," + b"y" * (length - 11) + b"\n")
        fh.write(f"{GOOD_2}\n".encode())
    parsed = parse_file(path)
    assert [r.node for r in parsed.records] == ["good-1", "good-2"]
    assert where(parsed) == [("line 3", f"line is {length + 1} bytes long, over the {MAX_LINE} byte limit")]
    (q,) = parsed.quarantined
    assert isinstance(q.payload, bytes) and len(q.payload) == MAX_QUARANTINE_PAYLOAD
    assert q.payload.startswith(b"n9,r1,8,,,,yyy")
    assert q.context == {"line_bytes": length + 1}


def test_many_bad_rows_in_one_file() -> None:
    rows = [GOOD_1, ",r1,8,,,,", "n3,r1,x,,,,", GOOD_2, "n5,r1,8,,,999.1.1.1,", "n6", "good-2,r1,8,,,,"]
    parsed = parse(HEADER + "\n" + "\n".join(rows) + "\n")
    assert [(r.node, r.line) for r in parsed.records] == [("good-1", 2), ("good-2", 5)]
    assert where(parsed) == [
        ("line 3", "node name is empty"),
        ("line 4", "gpu_count must be a whole number, got 'x'"),
        ("line 6", "bmc_address '999.1.1.1' is not an IP address"),
        ("line 7", "row has 1 cells, header has 7"),
        ("line 8", "duplicate node 'good-2' (first at line 5); first row kept"),
    ]
    assert parsed.status == "partial"


# --- 4. whole-file problems ----------------------------------------------------------------------

NODE_ALIASES = "device, device_name, host, hostname, name, node, node_name"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(b"", "the export is empty (no header row)", id="empty"),
        pytest.param(b"\n\r\n   \n", "the export is empty (no header row)", id="only-blank-lines"),
        pytest.param(
            b"rack,serial\nr1,S1\n",
            f"no node column in header ['rack', 'serial']; expected one of {NODE_ALIASES}",
            id="no-node-column",
        ),
        pytest.param(
            b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
            f"no node column in header ['\\\\x89PNG']; expected one of {NODE_ALIASES}",
            id="binary-junk",
        ),
        pytest.param(
            "node,rack\n".encode("utf-16"),
            "the export is UTF-16 or UTF-32 encoded; export it as UTF-8 CSV",
            id="utf-16",
        ),
        pytest.param(b'"node,rack\nn1,r1\n', "the header row is not CSV: unexpected end of data", id="header-quote"),
        pytest.param(
            b"node," + b"z" * (MAX_LINE + 5) + b"\n",
            f"the header row is longer than {MAX_LINE} bytes; this is not a CSV export",
            id="huge-header",
        ),
    ],
)
def test_csv_whole_file_problems(data: bytes, message: str) -> None:
    with pytest.raises(DcimFormatError) as caught:
        parse_csv(lines_of(data))
    assert type(caught.value) is DcimFormatError
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(b"", "the export is empty (no nodes)", id="empty"),
        pytest.param(b"# only a comment\n", "the export is empty (no nodes)", id="comment"),
        pytest.param(
            b"node: n1\nrack: r1\n",
            "YAML export must be a list of nodes (or a mapping with a 'nodes' list), got a dict",
            id="mapping",
        ),
        pytest.param(
            b"nodes: 5\n",
            "YAML export must be a list of nodes (or a mapping with a 'nodes' list), got a dict",
            id="nodes-not-a-list",
        ),
        pytest.param(
            b"just text", "YAML export must be a list of nodes (or a mapping with a 'nodes' list), got a str", id="str"
        ),
        pytest.param(
            b"- {node: n1\n- {node: n2}\n",
            'not valid YAML: while parsing a flow mapping in "<byte string>", line 1, column 3 did not find '
            "expected ',' or '}' in \"<byte string>\", line 2, column 3",
            id="syntax-error",
        ),
        pytest.param(
            b"- node: n1\n- node: \xff\n",
            'not valid YAML: unacceptable character #x00ff: invalid leading UTF-8 octet in "<byte string>", '
            "position 19",
            id="not-utf8",
        ),
        pytest.param(
            b"[" * 10_000 + b"]" * 10_000,
            'not valid YAML: while increasing flow level exceeded maximum nesting depth in "<byte string>", '
            "line 1, column 1001",
            id="nesting-bomb",
        ),
    ],
)
def test_yaml_whole_file_problems(data: bytes, message: str) -> None:
    with pytest.raises(DcimFormatError) as caught:
        parse_yaml(data)
    assert type(caught.value) is DcimFormatError
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("name", "fmt", "message"),
    [
        ("export.xlsx", None, "unknown DCIM export format 'xlsx' (csv or yaml)"),
        ("export.csv", "json", "unknown DCIM export format 'json' (csv or yaml)"),
        ("export", None, "unknown DCIM export format '' (csv or yaml)"),
    ],
)
def test_unknown_format(tmp_path: Path, name: str, fmt: str | None, message: str) -> None:
    path = tmp_path / name
    path.write_text("node\nn1\n")
    with pytest.raises(DcimFormatError) as caught:
        parse_file(path, fmt)
    assert str(caught.value) == message


def test_format_comes_from_suffix_or_argument(tmp_path: Path) -> None:
    (tmp_path / "a.YML").write_text("- {node: n1}\n")
    (tmp_path / "b.txt").write_text("node\nn2\n")
    assert [r.node for r in parse_file(tmp_path / "a.YML").records] == ["n1"]
    assert [r.node for r in parse_file(tmp_path / "b.txt", "CSV").records] == ["n2"]
    assert [r.node for r in parse_file(str(tmp_path / "b.txt"), "csv").records] == ["n2"]  # type: ignore[arg-type]


def test_an_oversized_yaml_file_is_refused_before_parsing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import connectors.dcim.parser as parser

    monkeypatch.setattr(parser, "MAX_YAML_BYTES", 100)
    path = tmp_path / "big.yaml"
    path.write_text("- {node: n1}\n" * 20)
    with pytest.raises(DcimFormatError, match=r"^YAML export is larger than the 100 byte limit$"):
        parse_file(path)


# --- 5. accounting (property) and fuzzing --------------------------------------------------------

# Single-line rows. Only the "unterminated quote" row contains a quote, and always right after a
# comma and before a letter, so whatever it swallows ends in an error and is read again.
_SAFE = st.text(alphabet="abcxyz0123456789-_!@#$%^&*() ./:;", min_size=1, max_size=12)
_NODE = st.integers(0, 40).map(lambda i: f"node-{i}")


@st.composite
def _row(draw: st.DrawFn) -> tuple[str, bytes]:
    """(kind, raw line without its ending); kind is good, bad or blank."""
    kind = draw(st.sampled_from(["good"] * 4 + ["bad"] * 4 + ["blank"]))
    node = draw(_NODE)
    if kind == "good":
        gpus = draw(st.integers(0, 1024))
        ip = f"10.1.{draw(st.integers(0, 255))}.{draw(st.integers(0, 255))}"
        return kind, f"{node.upper() if draw(st.booleans()) else node},r{gpus % 7},{gpus},{ip}".encode()
    if kind == "blank":
        return kind, draw(st.sampled_from([b"", b"   ", b",,,", b" , ,\t, "]))
    junk = draw(_SAFE)
    template = draw(
        st.sampled_from(
            [
                ",{j},8,10.0.0.1",  # empty node
                "bad_{j},r1,8,10.0.0.1",  # invalid hostname (underscore)
                "{n},r1,x{j},10.0.0.1",  # gpu_count not a number
                "{n},r1,-{d},10.0.0.1",  # negative
                "{n},r1,{d}9999,10.0.0.1",  # too large
                "{n},r1,8,ip{j}",  # not an IP
                "{n},r1",  # too few cells
                "{n},r1,8,10.0.0.1,{j}",  # too many cells
                "{n},r1\x00{j},8,10.0.0.1",  # NUL
                '{n},"r{j},8,10.0.0.1',  # unterminated quote
                "{n},r\xff{j},8,10.0.0.1",  # not UTF-8 (latin-1 encoded below)
            ]
        )
    )
    text = template.format(n=node, j=junk, d=draw(st.integers(1, 9)))
    return kind, text.encode("latin-1") if "\xff" in text else text.encode()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(_row(), max_size=40),
    crlf=st.lists(st.booleans(), min_size=41, max_size=41),
    final_newline=st.booleans(),
    chunk=st.integers(1, 64) | st.none(),
)
def test_every_data_row_is_a_record_or_exactly_one_quarantined_item(
    rows: list[tuple[str, bytes]], crlf: list[bool], final_newline: bool, chunk: int | None
) -> None:
    header = b"node,rack,gpu_count,bmc_address"
    physical = [header, *(raw for _, raw in rows)]
    endings = [b"\r\n" if c else b"\n" for c in crlf]
    data = b"".join(line + end for line, end in zip(physical, endings, strict=False))
    if not final_newline and rows:
        data = data.removesuffix(endings[len(rows)])
    stream = [data[i : i + chunk] for i in range(0, len(data), chunk)] if chunk else lines_of(data)

    parsed = parse_csv(iter(stream))

    # what each line should become: line numbers are 1-based, the header is line 1
    want_records: list[tuple[int, str]] = []
    want_quarantine: list[int] = []
    seen: set[str] = set()
    for number, (kind, raw) in enumerate(rows, start=2):
        if kind == "blank":
            continue
        if kind == "bad":
            want_quarantine.append(number)
            continue
        node = raw.split(b",")[0].decode().lower()
        if node in seen:
            want_quarantine.append(number)  # duplicate: first kept
        else:
            seen.add(node)
            want_records.append((number, node))
    assert [(r.line, r.node) for r in parsed.records] == want_records
    assert Counter(q.location for q in parsed.quarantined) == Counter(f"line {n}" for n in want_quarantine)
    non_blank = sum(kind != "blank" for kind, _ in rows)
    assert len(parsed.records) + len(parsed.quarantined) == non_blank
    # each quarantined item carries exactly its own line, raw
    by_line = {n: raw for n, (_, raw) in enumerate(rows, start=2)}
    for q in parsed.quarantined:
        payload = q.payload if isinstance(q.payload, bytes) else q.payload.encode()
        assert payload == by_line[int(str(q.location).split()[1])]
        assert q.reason


_CSV_ALPHABET = st.sampled_from(list(b'",\r\n\x00 \xff\xef\xbb\xbfnode;:0x1a'))


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=400) | st.lists(_CSV_ALPHABET, max_size=400).map(bytes), st.integers(1, 50))
def test_arbitrary_bytes_never_raise_anything_but_a_format_error(data: bytes, chunk: int) -> None:
    for stream in (lines_of(data), [data[i : i + chunk] for i in range(0, len(data), chunk)]):
        try:
            parsed = parse_csv(iter(stream))
        except DcimFormatError:
            continue
        assert isinstance(parsed, Parsed)
    try:
        parse_yaml(data)
    except DcimFormatError:
        pass


@settings(max_examples=400, deadline=None)
@given(st.lists(_CSV_ALPHABET, max_size=600).map(bytes))
def test_arbitrary_body_after_a_good_header_never_raises_and_never_double_counts(body: bytes) -> None:
    data = b"node,rack,x\n" + body
    parsed = parse_csv(lines_of(data))  # a usable header: no exception at all
    n_lines = len(lines_of(data))
    starts = [int(r.line or 0) for r in parsed.records]
    starts += [int(str(q.location).split()[1]) for q in parsed.quarantined]
    assert all(2 <= s <= n_lines for s in starts)
    # a line is the start of at most one outcome (an over-long line aside, which cannot happen here)
    assert len(starts) == len(set(starts))
    # everything that landed is storable: no NUL, no undecodable bytes
    for r in parsed.records:
        for value in (r.node, r.rack, *r.extra.keys(), *r.extra.values()):
            if value is not None:
                assert "\x00" not in value
                value.encode("utf-8")
    for q in parsed.quarantined:
        q.clipped_payload()[0].encode("utf-8")


_YAML_ALPHABET = st.sampled_from(list("-:[]{}&*!|>'\"\n #?,@%~node hcas\t0x1\\"))


@settings(max_examples=400, deadline=None)
@given(st.text(_YAML_ALPHABET, max_size=200))
def test_arbitrary_yaml_text_never_raises_anything_but_a_format_error(text: str) -> None:
    try:
        parsed = parse_yaml(text.encode())
    except DcimFormatError:
        return
    for q in parsed.quarantined:
        assert str(q.location).startswith("item ")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["node", "rack", "gpu_count", "hcas", "bmc", "notes"]),
            st.none() | st.text(max_size=8) | st.integers() | st.lists(st.text(max_size=5), max_size=3),
        )
        | st.none()
        | st.integers()
        | st.text(max_size=5),
        max_size=15,
    )
)
def test_every_yaml_item_is_a_record_or_exactly_one_quarantined_item(items: list[Any]) -> None:
    parsed = parse_yaml(yaml.safe_dump(items, allow_unicode=True).encode())
    locations = [q.location for q in parsed.quarantined]
    assert len(locations) == len(set(locations))
    assert len(parsed.records) + len(parsed.quarantined) == len(items)


# --- 6. huge input -------------------------------------------------------------------------------


def _huge(n: int, bad_every: int) -> Iterator[bytes]:
    """A generator of lines: the export is never held in memory, by the test or the parser."""
    yield b"node,rack,gpu_count,bmc_address,serial\n"
    for i in range(n):
        gpus = "lots" if i % bad_every == 0 else "8"
        yield f"node-{i:06d},r{i // 4:05d},{gpus},10.{i >> 16}.{(i >> 8) & 255}.{i & 255},SN{i:07d}\n".encode()


def test_a_100k_row_stream_parses_in_one_pass() -> None:
    # Not timed; a quadratic step (say, rescanning earlier rows: 5e9 row visits) would take minutes here.
    parsed = parse_csv(_huge(100_000, bad_every=1000))
    assert len(parsed.records) == 100_000 - 100
    assert len(parsed.quarantined) == 100
    assert [q.location for q in parsed.quarantined[:2]] == ["line 2", "line 1002"]
    assert parsed.quarantined[-1].location == f"line {99_000 + 2}"
    assert parsed.quarantined[-1].reason == "gpu_count must be a whole number, got 'lots'"
    last = parsed.records[-1]
    assert (last.node, last.line, last.bmc_address, last.serial) == (
        "node-099999", 100_001, "10.1.134.159", "SN0099999")


# --- 7. YAML specifics ---------------------------------------------------------------------------


def test_yaml_nodes_wrapper_and_hcas_as_a_list() -> None:
    data = f"""
version: 3
nodes:
  - node: DGX-01
    rack: r1
    gpu_count: 8
    hca_count: 2
    hcas: ["mlx5_0:rail0:{GUID0}", "mlx5_1:rail1:{GUID1}"]
    bmc_address: 10.0.0.1
    serial: 0012345670
    owner: team-a
  - node: dgx-02
    hcas: mlx5_0:rail0;mlx5_1
""".encode()
    parsed = parse_yaml(data, device="y")
    assert parsed.quarantined == []
    assert parsed.records == [
        DcimRecord(
            node="dgx-01",
            rack="r1",
            gpu_count=8,
            hca_count=2,
            hcas=(Hca("mlx5_0", 0, GUID0), Hca("mlx5_1", 1, GUID1)),
            bmc_address="10.0.0.1",
            serial="0012345670",  # plain YAML 1.1 would have read octal 2739128
            extra={"owner": "team-a"},
        ),
        DcimRecord(node="dgx-02", hcas=(Hca("mlx5_0", 0, None), Hca("mlx5_1", None, None))),
    ]


def test_yaml_scalars_stay_text() -> None:
    data = b"- {node: yes, rack: 1:30, serial: 0x1F, su: 2024-01-01, gpu_model: 1e3, gpu_count: 08}\n"
    (record,) = parse_yaml(data).records
    assert (record.node, record.rack, record.serial, record.su, record.gpu_model, record.gpu_count) == (
        "yes",
        "1:30",
        "0x1F",
        "2024-01-01",
        "1e3",
        8,
    )


def test_yaml_items_that_are_not_mappings_are_quarantined_by_item() -> None:
    data = b"- {node: n0}\n- just a string\n- \n- [a, b]\n- 42\n- {node: n5}\n"
    parsed = parse_yaml(data, device="y")
    assert [r.node for r in parsed.records] == ["n0", "n5"]
    assert where(parsed) == [
        ("item 1", "item 1 is not a mapping (got a str)"),
        ("item 2", "item 2 is not a mapping (got null)"),
        ("item 3", "item 3 is not a mapping (got a list)"),
        ("item 4", "item 4 is not a mapping (got a str)"),
    ]
    assert [q.payload for q in parsed.quarantined] == ["just a string\n", "null\n", "- a\n- b\n", "'42'\n"]
    assert {q.device for q in parsed.quarantined} == {"y"}


def test_yaml_bad_items_carry_reason_and_location() -> None:
    data = f"""
- {{node: n0, bmc_address: 10.0.0.1}}
- {{node: n1, bmc_address: nope}}
- {{node: n2, hca_count: 3, hcas: [mlx5_0, mlx5_1]}}
- {{node: n3, hcas: [mlx5_0, {{name: mlx5_1}}]}}
- {{node: n4, hcas: {{mlx5_0: 0}}}}
- {{node: n5, serial: !!binary AAEC}}
- {{node: n6, serial: "S\\0"}}
- {{node: N0}}
- {{rack: r1}}
- {{node: n9, gpu_count: !!bool true}}
- {{node: n10, gpu_count: [8]}}
- {{node: n11, notes: {{a: [1, 2]}}, gpu_count: !!int 4, hcas: ["mlx5_0:rail0:{GUID0}"]}}
""".encode()
    parsed = parse_yaml(data)
    assert [(r.node, r.gpu_count, r.extra) for r in parsed.records] == [
        ("n0", None, {}),
        ("n11", 4, {"notes": "{a: ['1', '2']}"}),
    ]
    assert where(parsed) == [
        ("item 1", "bmc_address 'nope' is not an IP address"),
        ("item 2", "hca_count says 3 but 2 HCAs are listed"),
        ("item 3", "hcas entry must be text like mlx5_0:rail0:0x<16 hex>, got a dict"),
        ("item 4", "hcas must be a list or a ';'-separated string, got a dict"),
        ("item 5", "serial is binary (!!binary) data, not text"),
        ("item 6", "row contains a NUL byte"),
        ("item 7", "duplicate node 'n0' (first at item 0); first row kept"),
        ("item 8", "node name is empty"),
        ("item 9", "gpu_count must be a whole number, got 'true'"),
        ("item 10", "gpu_count must be a whole number, got \"['8']\""),
    ]
    assert parsed.quarantined[0].payload == "node: n1\nbmc_address: nope\n"


def test_yaml_explicit_tags_are_judged_per_item_not_fatal() -> None:
    # PyYAML's own constructors raise ValueError / KeyError / AttributeError on these, which used
    # to escape the parser and fail the whole file.
    data = b"""
- {node: n0, gpu_count: !!int foo}
- {node: n1, gpu_count: !!int 0b}
- {node: n2, serial: !!timestamp 2024-02-30, notes: !!bool maybe, weight: !!float heavy}
- {node: n3, gpu_count: !!int 4}
- !!int 12
"""
    parsed = parse_yaml(data)
    assert [(r.node, r.gpu_count, r.serial, r.extra) for r in parsed.records] == [
        ("n2", None, "2024-02-30", {"notes": "maybe", "weight": "heavy"}),
        ("n3", 4, None, {}),
    ]
    assert where(parsed) == [
        ("item 0", "gpu_count must be a whole number, got 'foo'"),
        ("item 1", "gpu_count must be a whole number, got '0b'"),
        ("item 4", "item 4 is not a mapping (got a str)"),
    ]


def test_yaml_aliases_and_merge_keys() -> None:
    data = b"- &base {node: n1, rack: r1, gpu_count: 8}\n- {<<: *base, node: n2}\n"
    parsed = parse_yaml(data)
    assert [(r.node, r.rack, r.gpu_count) for r in parsed.records] == [("n1", "r1", 8), ("n2", "r1", 8)]


def test_yaml_alias_bomb_in_hcas_is_rejected_without_expanding_it() -> None:
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    data = ("defs:\n" + "\n".join(f"  {line}" for line in levels) + "\nnodes:\n  - {node: n1, hcas: [*a8]}\n").encode()
    parsed = parse_yaml(data)
    assert parsed.records == []
    assert where(parsed) == [("item 0", "hcas entry must be text like mlx5_0:rail0:0x<16 hex>, got a list")]
    assert len(parsed.quarantined[0].payload) <= MAX_QUARANTINE_PAYLOAD


def test_csv_and_yaml_agree_on_the_same_rows(tmp_path: Path) -> None:
    truth = truth_of("gb200-nvl72")
    a = parse_file(write_dcim_export(truth, tmp_path / "x.csv", "csv"))
    b = parse_file(write_dcim_export(truth, tmp_path / "x.yaml", "yaml"))
    assert [as_parsed(r) for r in a.records] == [as_parsed(r) for r in b.records]


def test_the_csv_module_limit_is_left_alone() -> None:
    before = csv.field_size_limit()
    parse(f"{HEADER}\n{GOOD_1}\n")
    assert csv.field_size_limit() == before
