"""``ibnetdiscover`` output under hostile input, read as the runner and ``gpufabric ib`` read it:
bytes through :func:`read_lines` into :func:`parse_ibnetdiscover`.

Seeds: a real GB200 node's output (../shared/fixtures/topograph/example-bad.out), the hand-made
fabric with every kind of odd node of test_ib_parser.py, and the simulator's h100-1su output (the
same layout ibsim's ibnetdiscover prints; test_ib_parser.py compares it with the ground truth).
test_ib_parser.py fuzzes garbage lines spliced into text; this file damages bytes (truncation,
flips, invalid UTF-8, NUL, repeated and lost lines, endless lines) and generates hostile
numbers. The contract (parser.py docstring): bad input never stops the parse, and every bad
line is quarantined with its line number and reason. So the accounting below is exact: every
line that is not blank or a comment became a node, a port, a header ``key=value``, or is counted
in exactly one quarantined row.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from connectors.ibnetdiscover import IbFabric, parse_file, parse_ibnetdiscover, read_lines
from simulator.generator import generate
from simulator.ib.ibnetdiscover import render_lines
from simulator.spec import load_spec
from simulator.specs import resolve_spec_path
from tests.conftest import FIXTURES
from tests.unit.fuzz_inputs import Mutated, mutated_bytes, storable
from tests.unit.test_ib_parser import MESSY

REAL = (FIXTURES / "topograph" / "example-bad.out").read_bytes()
SIMULATED = ("\n".join(list(render_lines(generate(load_spec(resolve_spec_path("h100-1su")))))[:600]) + "\n").encode()
SEEDS = {"real": REAL, "messy": MESSY.encode(), "simulated": SIMULATED}

# a header line: key=value, optionally followed by "(port GUID)" (switchguid=0x...(...))
_KV = re.compile(r"^(vendid|devid|sysimgguid|switchguid|caguid|rtguid)=\S+?(\([^)]*\))?$")
# Quarantined rows about something that was kept (a node whose description was cut, a link whose
# far end never appeared): they consume no line of their own.
_NOTICES = (
    "node description cut short",
    "node description is not valid UTF-8",
    "node header holds NUL",
    "port 0x",  # LinkResolver: a port pointing at a GUID with no node block
)
_MISMATCH = re.compile(r"^0x[0-9a-f]{16}\[\d+\] says its peer is ")


def parse_bytes(data: bytes) -> IbFabric:
    fabric = parse_ibnetdiscover(read_lines(io.BytesIO(data)), "fuzz")
    check(data, fabric)
    return fabric


def check(data: bytes, fabric: IbFabric) -> None:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    assert fabric.lines == len(lines)
    # blank as the parser sees it: str.strip(), whose whitespace includes \x1c-\x1f and \x85
    texts = [raw.decode("utf-8", "backslashreplace").strip() for raw in lines]
    counted = [n for n, text in enumerate(texts, 1) if text and not text.startswith("#")]
    kv = sum(1 for n in counted if _KV.match(texts[n - 1]))
    consumed = 0
    for q in fabric.quarantined:
        assert q.reason and storable(q.reason) and storable(q.location), q
        assert q.location is not None and re.fullmatch(r"line \d+", q.location), q.location
        if q.reason.startswith(_NOTICES) or _MISMATCH.match(q.reason):
            continue
        consumed += int(q.context.get("lines", 1))
    # no silent drop: nodes + ports + header lines + quarantined lines = the lines that say something
    assert len(fabric.nodes) + len(fabric.ports) + kv + consumed == len(counted), (
        len(fabric.nodes), len(fabric.ports), kv, consumed, len(counted))  # fmt: skip
    # what lands in raw.ib_nodes / raw.ib_ports is storable: text without NUL, numbers in range
    for node in fabric.nodes:
        assert all(storable(t) for t in (node.description, node.vendor_id, node.device_id, node.system_guid)), node
        assert 0 <= node.port_count <= 255 and all(v is None or 0 <= v <= 0xFFFF for v in (node.lid, node.lmc)), node
    for port in fabric.ports:
        assert storable(port.peer_description), port
        numbers = (port.port, port.peer_port, port.ext_port, port.lid, port.lmc, port.peer_lid)
        assert all(v is None or 0 <= v <= 0xFFFF for v in numbers), port
    for link in fabric.links:
        assert link.a_guid in fabric.classes and (link.b_guid in fabric.classes), link
    for c in fabric.classes.values():
        assert storable(c.hostname) and storable(c.hca) and storable(c.switch_name), c


@st.composite
def _damaged(draw: st.DrawFn) -> Mutated:
    return draw(mutated_bytes(SEEDS[draw(st.sampled_from(sorted(SEEDS)))]))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_damaged())
@example(Mutated(MESSY.encode().replace(b'"dgx001 mlx5_0" lid 11', b'"dgx\x00001 mlx5_0" lid 11'), ["NUL"]))
@example(Mutated(MESSY.encode().replace(b"Switch\t65", b"Switch\t99999999999"), ["port count beyond int4"]))
@example(Mutated(MESSY.encode().replace(b"lid 11 4xNDR", b"lid 99999999999 4xNDR"), ["lid beyond int4"]))
def test_damaged_outputs(mutated: Mutated) -> None:
    parse_bytes(mutated.data)


# --- generated lines ------------------------------------------------------------------------------

_GUIDS = st.sampled_from(["b83fd20300000001", "b83fd20300000011", "0", "f" * 16, "f" * 17, "g1", ""])
_NUMBERS = st.sampled_from(["0", "1", "65", "255", "256", "65535", "65536", "4294967296", "9" * 30])
_TEXT = st.text(max_size=12) | st.sampled_from(["", '"', "dgx001 mlx5_0", "MF0;ib-leaf-01:MQM9700/U1", "\x00"])


@st.composite
def _line(draw: st.DrawFn) -> str:
    g, n, t = draw(_GUIDS), draw(_NUMBERS), draw(_TEXT)
    return draw(
        st.sampled_from(
            [
                f"switchguid=0x{g}({g})",
                f"sysimgguid=0x{g}",
                f'Switch\t{n} "S-{g}"\t\t# "{t}" enhanced port 0 lid {n} lmc {n}',
                f'Ca\t{n} "H-{g}"\t\t# "{t}"',
                f'[{n}]\t"H-{g}"[{n}]({g}) \t\t# "{t}" lid {n} 4xNDR',
                f'[{n}]({g}) \t"S-{g}"[{n}]\t\t# lid {n} lmc {n} "{t}" lid {n} {n}x{t}',
                f'[{n}][ext {n}]\t"H-{g}"[{n}]({g})',
                "",
                t,
            ]
        )
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(_line(), max_size=25))
def test_generated_lines(lines: list[str]) -> None:
    parse_bytes("\n".join(lines).encode("utf-8", "surrogatepass"))


def test_an_endless_line_is_clipped_and_the_file_still_parses(tmp_path: Path) -> None:
    # read_lines holds at most 64 KiB of a line; the rest is drained, never joined
    path = tmp_path / "long.out"
    path.write_bytes(MESSY.encode() + b'[1]\t"H-' + b"a" * 10_000_000 + b"\n" + MESSY.encode()[:200])
    fabric = parse_file(path, "fuzz")
    check(path.read_bytes(), fabric)
    assert [q.reason.split(" (")[0] for q in fabric.quarantined][:1] == ["line longer than 65536 bytes"]
    assert len(fabric.nodes) == 11
