"""core.hostlist: compact host ranges, strict on bad input, exact round trips."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.hostlist import MAX_NAMES, compress, expand


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("dgx[001-004,010]", ["dgx001", "dgx002", "dgx003", "dgx004", "dgx010"]),
        ("rack[1-2]-node[01-02]", ["rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"]),
        ("a,b[1-2],c", ["a", "b1", "b2", "c"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("n[098-101]", ["n098", "n099", "n100", "n101"]),
        ("n[1-2]x", ["n1x", "n2x"]),
        ("[1-3]", ["1", "2", "3"]),
        ("dgx001", ["dgx001"]),
        ("a[1,1]", ["a1", "a1"]),  # duplicates are kept as written
        (" a , b ", ["a", "b"]),
        ("x[1-2],y[3,5-6]z", ["x1", "x2", "y3z", "y5z", "y6z"]),
    ],
)
def test_expand_examples(expr: str, names: list[str]) -> None:
    assert expand(expr) == names


def test_expand_counts_and_padding_of_a_superpod() -> None:
    names = expand("dgx[001-128]")
    assert len(names) == 128
    assert names[0] == "dgx001" and names[99] == "dgx100" and names[-1] == "dgx128"
    assert all(len(n) == 6 for n in names)
    trays = expand("gb200-r[01-08]-t[01-18]")
    assert len(trays) == 144
    assert trays[17] == "gb200-r01-t18" and trays[18] == "gb200-r02-t01"


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("dgx[001-004", "unbalanced"),
        ("dgx001-004]", "unbalanced"),
        ("dgx[5-1]", "reversed"),
        ("dgx[]", "empty range"),
        ("dgx[1,]", "empty range"),
        ("a,,b", "empty item"),
        ("a,", "empty item"),
        ("a[[1-2]]", "nested"),
        ("a[x-2]", "not N or N-M"),
        ("a[1-2-3]", "not N or N-M"),
        ("a[-2]", "not N or N-M"),
        ("a[\u0663]", "not N or N-M"),  # Arabic-Indic digit: str.isdigit() says yes, we say no
        ("dgx 001", "whitespace"),
        (f"n[1-{MAX_NAMES + 1}]", "more than"),
        ("a[1-1000]b[1-1000]", "more than"),
        ("a[1-60000],b[1-60000]", "more than"),
    ],
)
def test_expand_rejects_malformed(expr: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        expand(expr)


def test_expand_allows_exactly_the_limit() -> None:
    assert len(expand(f"n[1-{MAX_NAMES}]")) == MAX_NAMES


@pytest.mark.parametrize(
    ("names", "expr"),
    [
        (["dgx001", "dgx002", "dgx003", "dgx004", "dgx010"], "dgx[001-004,010]"),
        (["n8", "n9", "n10", "n11"], "n[8-11]"),
        (["n098", "n099", "n100"], "n[098-100]"),
        (["n999", "n1000"], "n[999-1000]"),
        (["a", "b1", "b2", "c"], "a,b[1-2],c"),
        (["x1y", "x2y", "x3z"], "x[1-2]y,x3z"),
        (["n1", "n01"], "n[1,01]"),
        (["n3", "n2", "n1"], "n[3,2,1]"),  # order is kept, so no range
        (["dgx007"], "dgx007"),
        ([], ""),
    ],
)
def test_compress_examples(names: list[str], expr: str) -> None:
    assert compress(names) == expr
    if names:
        assert expand(expr) == names


def test_compress_sorted_is_natural_and_unique() -> None:
    assert compress(["n10", "n2", "n1", "n2"], sort=True) == "n[1-2,10]"
    assert compress(["dgx003", "dgx001", "dgx002"], sort=True) == "dgx[001-003]"


@pytest.mark.parametrize("bad", ["a,b", "a[1]", "x]", "", " a", "a b"])
def test_compress_rejects_unrepresentable_names(bad: str) -> None:
    with pytest.raises(ValueError, match="cannot compress"):
        compress(["ok1", bad])


# --- properties --------------------------------------------------------------------------------

_prefix = st.text(alphabet="abcdefgxyz-_.", min_size=0, max_size=5)
_suffix = st.text(alphabet="abz-", min_size=0, max_size=2)


@st.composite
def _host_names(draw: st.DrawFn) -> str:
    """A name shaped like a real host: prefix, a possibly zero-padded number, optional suffix."""
    prefix = draw(_prefix)
    number = draw(st.integers(min_value=0, max_value=2000))
    width = draw(st.integers(min_value=1, max_value=5))
    suffix = draw(_suffix)
    name = f"{prefix}{number:0{width}d}{suffix}"
    return name


_names = st.lists(
    st.one_of(_host_names(), st.text(alphabet="abcxyz-.", min_size=1, max_size=6)), min_size=1, max_size=40
)


@given(_names)
def test_round_trip_preserves_any_list_exactly(names: list[str]) -> None:
    assert expand(compress(names)) == names


@given(_names)
def test_sorted_compress_expands_to_the_sorted_set(names: list[str]) -> None:
    expanded = expand(compress(names, sort=True))
    assert sorted(expanded) == sorted(set(names))
    assert len(expanded) == len(set(names))


@st.composite
def _range_exprs(draw: st.DrawFn) -> tuple[str, int]:
    """An expression with 1-3 bracket groups, and how many names it must expand to."""
    groups = draw(st.integers(min_value=1, max_value=3))
    expr = draw(st.text(alphabet="abc", min_size=1, max_size=3))
    total = 1
    for _ in range(groups):
        lo = draw(st.integers(min_value=0, max_value=120))
        span = draw(st.integers(min_value=0, max_value=12))
        width = draw(st.integers(min_value=1, max_value=4))
        expr += f"[{lo:0{width}d}-{lo + span:0{width}d}]" + draw(st.text(alphabet="-x", max_size=1))
        total *= span + 1
    return expr, total


@given(_range_exprs())
def test_expansion_size_is_the_product_of_ranges(case: tuple[str, int]) -> None:
    expr, total = case
    names = expand(expr)
    assert len(names) == total
    assert expand(compress(names)) == names


@settings(max_examples=300)
@given(st.text(alphabet="ab01[]-, ", max_size=20))
def test_expand_fails_only_with_value_error(expr: str) -> None:
    """Fuzz: arbitrary text either expands to non-empty names or raises ValueError, nothing else."""
    try:
        names = expand(expr)
    except ValueError:
        return
    assert names
    assert all(name and "[" not in name and "]" not in name and "," not in name for name in names)
