"""``lldpctl -f json`` (host-side and lldpd switches) under hostile input.

Seeds: a real Spectrum-X host's output (../shared/fixtures/topograph/lldp.log, 49 interfaces in
the list layout) and a real Cumulus ``net show lldp json`` (json0 layout, vendor-lldp/cumulus).
The parser's contract (``connectors/lldpctl/parser.py``): output that is not lldpctl JSON is
quarantined whole with command and platform; otherwise every interface entry of the document
becomes a neighbour, a quarantined row of its own, or a dropped interface with the filter's
reason. So the accounting below is exact: entries in = neighbours + quarantined + dropped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from connectors.lldpctl import LldpctlResult, parse_lldpctl
from connectors.ssh.parsers import OutputError, check_output
from tests.unit.fuzz_inputs import (
    JSON_VALUES,
    Mutated,
    MutatedJson,
    assert_quarantine_row,
    assert_storable_neighbor,
    mutated_bytes,
    mutated_json,
)

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures"
HOST = (FIXTURES / "topograph" / "lldp.log").read_text()
JSON0 = (FIXTURES / "vendor-lldp" / "cumulus" / "suzieq-cl430-net-show-lldp-json-self-loop" / "raw.json").read_text()
# Structural mutations work on a cut of the host's 49 entries (the management NIC, eight
# data-plane NICs, four VF representors): every kind of entry, at a quarter of the parse time.
_ENTRIES = json.loads(HOST)["lldp"]["interface"]
HOST_DOC = {"lldp": {"interface": _ENTRIES[:9] + _ENTRIES[-4:]}}
JSON0_DOC = json.loads(JSON0)


def _entry_names(text: str) -> list[str | None] | None:
    """The local interface of every entry of the document (None for an entry that names none),
    read here without the parser; None when the text is not an lldpctl document at all (then it
    must be quarantined whole)."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return None
    lldp = doc.get("lldp") if isinstance(doc, dict) else None
    if isinstance(lldp, list):  # json0: [{"interface": [{"name": ...}, ...]}]
        if len(lldp) != 1 or not isinstance(lldp[0], dict) or not isinstance(lldp[0].get("interface", []), list):
            return None
        return [e["name"] if isinstance(e, dict) and isinstance(e.get("name"), str) else None
                for e in lldp[0].get("interface", [])]  # fmt: skip
    if not isinstance(lldp, dict):
        return None
    entries = lldp.get("interface")
    if entries is None:
        return []
    if isinstance(entries, dict):
        return [str(k) for k in entries]
    if isinstance(entries, list):
        return [str(next(iter(e))) if isinstance(e, dict) and len(e) == 1 else None for e in entries]
    return None


def check(text: str, result: LldpctlResult) -> None:
    for q in result.quarantined:
        assert_quarantine_row(q, "h")
    for n in result.neighbors:
        assert_storable_neighbor(n)
    whole = [q for q in result.quarantined if q.location == "output"]
    names = _entry_names(text)
    if whole:
        assert result.neighbors == [] and result.quarantined == whole and len(whole) == 1
        assert whole[0].reason.startswith("unparseable lldpctl -f json output: ")
        assert whole[0].context == {"command": "lldpctl -f json", "platform": "linux"}
        return
    # no silent drop: every entry landed, was quarantined alone, or was dropped by the filter
    assert names is not None, "a document that is not lldpctl JSON was not quarantined whole"
    dropped = sum(1 for name in names if name in result.dropped)
    assert len(result.neighbors) + len(result.quarantined) + dropped == len(names), (
        len(result.neighbors), len(result.quarantined), dropped, len(names))  # fmt: skip
    for q in result.quarantined:
        assert q.location is not None and q.location.startswith("interface ")
        assert q.reason.startswith(("bad neighbour on ", "bad neighbour in interface entry "))


def _parse(text: str) -> LldpctlResult:
    result = parse_lldpctl(text, "h")
    check(text, result)
    return result


# --- mutated real captures ---------------------------------------------------------------------


def _entries_of_host() -> list[tuple[str | int, ...]]:
    return [("lldp", "interface", i) for i in range(len(HOST_DOC["lldp"]["interface"]))]


def _entries_of_json0() -> list[tuple[str | int, ...]]:
    return [("lldp", 0, "interface", i) for i in range(len(JSON0_DOC["lldp"][0]["interface"]))]


@settings(max_examples=150, deadline=None)
@given(mutated_json(HOST_DOC, within=_entries_of_host()))
@example(MutatedJson(  # a chassis whose id is a string, not {"type", "value"}: was an AttributeError
    json.dumps({"lldp": {"interface": {"eth0": {"chassis": {"sw1": {"id": "abc"}},
                                                "port": {"id": {"type": "ifname", "value": "x"}}}}}}),
    ["regression"], []))  # fmt: skip
@example(MutatedJson(  # an entry that is no object: was dropped without a word
    json.dumps({"lldp": {"interface": {"eth0": 5, "eth1": None}}}), ["regression"], []))  # fmt: skip
@example(MutatedJson(  # NUL and a lone surrogate inside JSON strings: Postgres text can hold neither
    json.dumps({"lldp": {"interface": {"eth\u00000": {"chassis": {"s\ud800": {"id": {"type": "local", "value": "a"}}},
                                                      "port": {"id": {"type": "ifname", "value": "x"}}}}}}),
    ["regression"], []))  # fmt: skip
def test_mutated_host_entries_land_or_are_quarantined_alone(mutated: MutatedJson) -> None:
    result = _parse(mutated.text)
    if mutated.steps != ["regression"] and _is_json(mutated.text):
        # damage inside interface entries never costs the whole output, and never more than the
        # entries it touched (unless the damage made the text no JSON Python reads: a number of
        # 5,000 digits, nesting 100,000 deep)
        assert not any(q.location == "output" for q in result.quarantined)
        touched = {path[2] for path in mutated.touched}
        assert len(result.quarantined) <= len(touched)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


@settings(max_examples=100, deadline=None)
@given(mutated_json(JSON0_DOC, within=_entries_of_json0()))
def test_mutated_json0_entries_land_or_are_quarantined(mutated: MutatedJson) -> None:
    _parse(mutated.text)


@settings(max_examples=100, deadline=None)
@given(mutated_json(HOST_DOC, max_steps=3))
def test_mutated_host_document_anywhere(mutated: MutatedJson) -> None:
    _parse(mutated.text)


def _parse_bytes(data: bytes) -> None:
    """The byte path every caller takes (assets/lldp_cli, ``gpufabric ingest lldp``): the output
    check first (size, UTF-8, control characters, a CLI error or prompt), then the parser."""
    try:
        text = check_output(data)
    except OutputError as err:
        assert str(err).startswith(("binary output: ", "output of ", "the CLI answered", "a CLI prompt")), err
        return
    _parse(text)


@settings(max_examples=60, deadline=None)
@given(mutated_bytes(HOST.encode()))
def test_damaged_host_bytes(mutated: Mutated) -> None:
    _parse_bytes(mutated.data)


@settings(max_examples=60, deadline=None)
@given(mutated_bytes(JSON0.encode()))
def test_damaged_json0_bytes(mutated: Mutated) -> None:
    _parse_bytes(mutated.data)


# --- generated documents -----------------------------------------------------------------------

_ids = st.fixed_dictionaries({"type": st.sampled_from(["mac", "ip", "ifname", "ifalias", "local", "x"]) | JSON_VALUES,
                              "value": st.sampled_from(["02:00:00:00:00:01", "10.0.0.1", "::1", "swp1", ""])
                              | JSON_VALUES})  # fmt: skip
_entry = st.fixed_dictionaries(
    {"chassis": st.one_of(st.dictionaries(st.text(max_size=6), st.fixed_dictionaries({"id": _ids | JSON_VALUES}),
                                          max_size=2), st.fixed_dictionaries({"id": _ids}), JSON_VALUES),
     "port": st.fixed_dictionaries({"id": _ids | JSON_VALUES, "descr": JSON_VALUES}) | JSON_VALUES},
    optional={"rid": JSON_VALUES, "via": JSON_VALUES},
)  # fmt: skip
_names = st.sampled_from(["eth0", "eth_r1_p0", "enx0", "eth_vf0", "lo", "", "a\x00", "\ud83d"]) | st.text(max_size=6)
_documents = st.one_of(
    st.builds(lambda d: {"lldp": {"interface": d}}, st.dictionaries(_names, _entry | JSON_VALUES, max_size=4)),
    st.builds(lambda items: {"lldp": {"interface": [{k: v} for k, v in items]}},
              st.lists(st.tuples(_names, _entry | JSON_VALUES), max_size=4)),
    st.builds(lambda items: {"lldp": [{"interface": items}]},
              st.lists(st.fixed_dictionaries({"name": _names | JSON_VALUES}) | JSON_VALUES, max_size=3)),
    JSON_VALUES.map(lambda v: {"lldp": v}),
    JSON_VALUES,
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(_documents)
def test_generated_documents(doc: Any) -> None:
    _parse(json.dumps(doc))
