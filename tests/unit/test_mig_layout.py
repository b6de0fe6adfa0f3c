"""Layout validity: each placement rule on hand-made layouts, the enumeration of every valid
layout against an independent check, and the cross-check against the fixtures' derived (unverified)
combination list.

Cross-check result (``derived_valid_combinations_h100_h200.txt``): no disagreement. Our rules,
derived from the profile table, give the file's 2,318 non-empty placement sets, 127 distinct
non-empty multisets and exactly its 64 "maximal" multisets -- the file's "maximal" means a
*placement* no further instance fits beside. 20 of those 64 are not maximal as multisets: another
placement of the same instances leaves room for one more (e.g. 1g.10gb + 3 x 1g.20gb placed with
the 1g.20gb at 0, 2, 4 strands slice 7, while 1g.20gb at 0, 2, 6 leaves slices 4 and 5 for two
1g.10gb). The planner packs with the 44 multiset-maximal ones. mig-parted takes counts, not
placements, and tries every creation order, so what it can apply is the multiset.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.mig.layout import Placement, counts_of, layout_space, validate_layout
from core.mig.profiles import MODELS, model_named

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "mig"
DERIVED = (FIXTURES / "derived_valid_combinations_h100_h200.txt").read_text()
TOKENS = {"1g": 0, "1g+me": 1, "1g.2x": 2, "2g": 3, "3g": 4, "4g": 5, "7g": 6}  # the file's legend


def _derived() -> tuple[dict[str, int], set[tuple[int, ...]]]:
    header = re.search(
        r"placements\(sets\): (\d+)\s+distinct profile multisets: (\d+)\s+maximal multisets: (\d+)", DERIVED
    )
    assert header is not None
    numbers = dict(zip(("sets", "multisets", "maximal"), map(int, header.groups()), strict=True))
    combos: set[tuple[int, ...]] = set()
    for line in DERIVED.splitlines():
        if "|" not in line or line.startswith("#"):
            continue
        left, right = line.split("|")
        vector = [0] * 7
        for token in left.split():
            count, name = re.fullmatch(r"\+?(\d+)x(\S+)", token).groups()  # type: ignore[union-attr]
            vector[TOKENS[name]] += int(count)
        compute = int(re.fullmatch(r"\s*compute (\d+)\s*", right).group(1))  # type: ignore[union-attr]
        assert compute == sum(n * c for n, c in zip(vector, (1, 1, 1, 2, 3, 4, 7), strict=True)), line
        combos.add(tuple(vector))
    return numbers, combos


@pytest.mark.parametrize("model", ["H100-80GB", "H200-141GB"])
def test_enumeration_agrees_with_the_derived_combinations(model: str) -> None:
    numbers, combos = _derived()
    space = layout_space(model)
    assert len(space.layouts) - 1 == numbers["sets"] == 2318  # the empty layout is ours only
    assert len(space.feasible) - 1 == numbers["multisets"] == 127
    placement_maximal = {counts_of(space.model, layout) for layout in space.maximal_layouts}
    assert placement_maximal == combos and len(combos) == numbers["maximal"] == 64
    assert combos <= space.feasible
    assert set(space.maximal_counts) <= combos and len(space.maximal_counts) == 44
    # the example in the module docstring: placement-maximal, yet one more 1g.10gb fits elsewhere
    stranded = (1, 0, 3, 0, 0, 0, 0)
    assert stranded in combos and stranded not in space.maximal_counts
    assert space.is_feasible((2, 0, 3, 0, 0, 0, 0))


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_every_enumerated_layout_is_valid_and_realises_its_multiset(model) -> None:
    space = layout_space(model)
    assert len(set(space.layouts)) == len(space.layouts)
    for layout in space.layouts:
        assert validate_layout(model, layout) == [], layout
    for counts, layout in space.placement_of.items():
        assert counts_of(model, layout) == counts
    for layout in space.maximal_layouts:  # nothing at all can be added
        for prof in model.profiles:
            for start in prof.starts:
                assert validate_layout(model, (*layout, Placement(prof.name, start))) != []


RULE_CASES = [
    ("H100-80GB", [("4g.40gb", 0), ("3g.40gb", 4)], []),
    ("H100-80GB", [("3g.40gb", 0), ("3g.40gb", 4), ("1g.10gb", 7)], ["start-not-allowed", "overlap"]),
    ("H100-80GB", [("1g.20gb", 7)], ["start-not-allowed", "out-of-range"]),
    ("H100-80GB", [("2g.20gb", 1)], ["start-not-allowed"]),
    ("H100-80GB", [("3g.40gb", 0), ("2g.20gb", 2)], ["overlap"]),
    ("H100-80GB", [("4g.40gb", 0), ("2g.20gb", 4), ("1g.20gb", 6), ("1g.10gb", 6)], ["overlap", "compute"]),
    ("H100-80GB", [("1g.10gb+me", 0), ("1g.10gb+me", 1)], ["max-instances", "media"]),
    ("H100-80GB", [("1g.20gb", 0), ("1g.20gb", 2), ("1g.20gb", 4), ("1g.20gb", 6)], []),
    ("H100-80GB", [("7g.80gb", 0), ("1g.10gb", 0)], ["overlap", "compute"]),
    ("H100-80GB", [("1g.5gb", 0)], ["unknown-profile"]),
    ("H100-80GB", [("1g.10gb", "0")], ["start-not-allowed"]),
    ("A100-40GB", [("1g.10gb", 1)], ["start-not-allowed"]),  # 2 memory slices on the 40GB part
    ("A100-40GB", [("1g.5gb", k) for k in range(7)], []),
    ("H200-141GB", [("3g.71gb", 0), ("4g.71gb", 0)], ["overlap"]),
]


@pytest.mark.parametrize(("model", "layout", "rules"), RULE_CASES)
def test_each_rule_is_reported(model: str, layout: list[tuple[str, int]], rules: list[str]) -> None:
    found = validate_layout(model, layout)
    assert sorted({v.rule for v in found}) == sorted(rules), found
    assert all(v.message for v in found)


def test_violation_messages_say_what_and_where() -> None:
    (v,) = validate_layout("H100-80GB", [("2g.20gb", 1)])
    assert v.message == "2g.20gb may start at [0, 2, 4] on H100-80GB, not at 1"
    overlap = validate_layout("H100-80GB", [("3g.40gb", 0), ("2g.20gb", 2)])
    assert overlap[0].message == "3g.40gb@0 and 2g.20gb@2 share memory slices"
    over = validate_layout("H100-80GB", [("4g.40gb", 0), ("3g.40gb", 4), ("1g.10gb", 7)])
    assert "8 compute slices placed, H100-80GB has 7" in [x.message for x in over]


def _independent_valid(model_name: str, layout: list[tuple[str, int]]) -> bool:
    """The rules written again, slice by slice, without the code under test."""
    model = model_named(model_name)
    owner: dict[int, int] = {}
    compute = media = 0
    counts: dict[str, int] = {}
    for k, (name, start) in enumerate(layout):
        prof = model.profile(name)
        if start not in prof.starts:
            return False
        for slot in range(start, start + prof.memory_slices):
            if slot in owner or slot >= 8:
                return False
            owner[slot] = k
        compute += prof.compute_slices
        media += prof.media_extensions
        counts[name] = counts.get(name, 0) + 1
    return compute <= 7 and media <= 1 and all(n <= model.profile(p).max_instances for p, n in counts.items())


@cache
def _as_sets(model: str) -> frozenset[frozenset[Placement]]:
    return frozenset(frozenset(x) for x in layout_space(model).layouts)


@settings(max_examples=400, deadline=None)
@given(
    model=st.sampled_from([m.name for m in MODELS]),
    picks=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 7)), max_size=8),
)
def test_validity_agrees_with_an_independent_check_and_the_enumeration(
    model: str, picks: list[tuple[int, int]]
) -> None:
    gpu = model_named(model)
    layout = [(gpu.profiles[i].name, start) for i, start in picks]
    valid = validate_layout(model, layout) == []
    assert valid == _independent_valid(model, layout)
    placements = frozenset(Placement(p, s) for p, s in layout)
    if len(placements) < len(layout):  # the same instance twice overlaps itself
        assert not valid
    else:
        assert valid == (placements in _as_sets(model))
