"""The site file (``gpufabric.yaml``) under hostile input: the shipped example damaged byte by byte
and structure by structure, through ``settings.parse_settings`` (what ``load_settings`` runs on the
file's bytes).

test_settings.py fuzzes YAML-like token soup and arbitrary short input; this file starts from the
real, complete example, so the damage lands deep inside valid sections (a switch's SNMP block, a
rate card, the budget section) where the messages have to find the right line and path. The
contract (settings/errors.py): the outcome is a ``Settings`` or a ``SettingsError`` whose every
line is one human sentence naming the file (and the line where there is one), with no pydantic
rendering, no traceback and no chained ValidationError that would print the raw input.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from settings import Settings, SettingsError, parse_settings
from tests.unit.fuzz_inputs import Mutated, MutatedJson, mutated_bytes, mutated_json, render

EXAMPLE = Path(__file__).resolve().parents[2] / "gpufabric.example.yaml"
DATA = EXAMPLE.read_bytes()


def _plain(value: Any) -> Any:
    """The document with YAML's dates as the ISO text they were written as (JSON has no dates)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value.isoformat() if isinstance(value, date) else value


DOC = _plain(yaml.safe_load(DATA))
SOURCE = "gpufabric.yaml"
NOT_FOR_HUMANS = ("Traceback", 'File "', "errors.pydantic.dev", "pydantic", "validation error", "[type=",
                  "input_value", "Value error,")  # fmt: skip


def outcome(data: str | bytes) -> Settings | SettingsError:
    try:
        return parse_settings(data, source=SOURCE, base_dir=EXAMPLE.parent)
    except SettingsError as error:
        message = str(error)
        assert message.strip(), "an error without a message"
        for bad in NOT_FOR_HUMANS:
            assert bad not in message, f"{bad!r} leaked into: {message}"
        assert error.__cause__ is None and (error.__suppress_context__ or error.__context__ is None)
        for line in message.splitlines():
            assert line.startswith(SOURCE) or line.startswith("... and "), line
        for problem in error.problems:
            assert problem.message and (problem.line is None or problem.line >= 1), problem
        return error


def test_the_seed_loads() -> None:
    assert isinstance(outcome(DATA), Settings)
    assert isinstance(outcome(json.dumps(DOC)), Settings)  # the structural mutations are written as JSON


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutated_bytes(DATA))
def test_damaged_bytes(mutated: Mutated) -> None:
    outcome(mutated.data)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_json(DOC, max_steps=3))
def test_damaged_structure(mutated: MutatedJson) -> None:
    # written as JSON (a YAML subset): values of every type, keys deleted or given twice, huge
    # numbers and strings, nesting deeper than the schema allows
    outcome(mutated.text)


_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_json(DOC, max_steps=2))
@example(MutatedJson(json.dumps({"\n": 1, "version": 1}), ["a key holding a line break"], []))
def test_damaged_structure_in_block_style(mutated: MutatedJson) -> None:
    # the same damage written as an operator writes YAML, so errors point at real lines
    try:
        doc = json.loads(mutated.text)
    except (RecursionError, ValueError):
        return  # a 5,000-digit number, 100,000-deep nesting: covered as JSON above
    try:
        text = yaml.dump(doc, Dumper=_DUMPER, sort_keys=False, allow_unicode=True)
    except UnicodeEncodeError:
        return  # a lone surrogate: no file holds one, and the JSON form above sends it escaped
    error = outcome(text)
    if isinstance(error, SettingsError):
        for problem in error.problems:
            assert problem.line is None or problem.line <= text.count("\n") + 1, problem


def test_a_key_with_a_line_break_stays_one_line_of_the_report() -> None:
    # was: "unknown key '" newline "'; valid keys here: ..." -- a problem split over two lines
    error = outcome('version: 1\n"a\\nb": 1\n')
    assert isinstance(error, SettingsError)
    assert str(error).splitlines() == [
        f"gpufabric.yaml:2: unknown key 'a\\nb'; valid keys here: {', '.join(Settings.model_fields)}"
    ]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(sorted(DOC)), min_size=1, max_size=4, unique=True), st.data())
def test_sections_replaced_by_any_value(sections: list[str], data: st.DataObject) -> None:
    doc = dict(DOC)
    for section in sections:
        doc[section] = data.draw(
            st.sampled_from([None, 0, -1, "", "x", [], {}, [None], {"": None}, 10**30, 1e308, True, "\x00"]),
            label=section,
        )
    outcome(render(doc))
