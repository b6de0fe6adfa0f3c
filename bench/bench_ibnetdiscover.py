"""Parse benchmark: our ibnetdiscover parser against a bare regex scan of the same file.

What is measured, on the generated ibnetdiscover output of a 16-SU spec (``b200-16su``: 320
Quantum-2 switches with their SHARP aggregation nodes, 4,096 HCAs; ``--quick``: ``h100-4su``):

(a) ``parse_file``: the whole connector: streamed read, node/port records, link pairing,
    classification, findings -- what the asset and ``gpufabric ingest ibnetdiscover`` run;
(b) ``iter_records`` alone: the record stream, without link pairing or classification;
(c) the peer: the floor any Python parser of this format pays -- read the same file line by line
    and match each line against one precompiled regex, building nothing.

Reported: lines/s for each (median and spread over interleaved rounds) and the per-round ratio
(a)/(c): how much of the floor's speed the full parser
keeps. Each run checks the parse (links = ground truth, nothing quarantined), so a parser that
got faster by dropping lines fails loudly.
"""

from __future__ import annotations

import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.common import Spread, interleaved, ratio_line, spec_arguments
from connectors.ibnetdiscover import iter_records, parse_file, read_lines
from core.models import LinkKind
from simulator.generator import generate
from simulator.ib.ibnetdiscover import write_ibnetdiscover
from simulator.spec import load_spec
from simulator.specs import resolve_spec_path

_FLOOR = re.compile(r'^\[(\d+)\][^"]*"([SHR])-([0-9a-fA-F]+)"\[(\d+)\]|^(Switch|Ca)\s+(\d+)\s+"')


def _floor(path: Path) -> int:
    n = 0
    match = _FLOOR.match
    with path.open("rb") as fh:
        for raw in fh:
            match(raw.decode("utf-8"))
            n += 1
    return n


def _records(path: Path) -> int:
    with path.open("rb") as fh:
        for _ in iter_records(read_lines(fh)):
            pass
    return sum(1 for _ in path.open("rb"))


def main(argv: Sequence[str]) -> int:
    spec_name, runs = spec_arguments("bench_ibnetdiscover", __doc__.splitlines()[0], argv)
    truth = generate(load_spec(resolve_spec_path(spec_name)))
    with tempfile.TemporaryDirectory() as tmp:
        path = write_ibnetdiscover(truth, Path(tmp) / "ibnetdiscover.out")
        lines = sum(1 for _ in path.open("rb"))
        size_mb = path.stat().st_size / 1e6
        fabric = parse_file(path)
        want = {(lk.a.device_id, lk.a.port, lk.b.device_id, lk.b.port) for lk in truth.links if lk.kind is LinkKind.IB}
        got = {
            (x.a.device_id, x.a.port, x.b.device_id, x.b.port) for x in (lk.to_link() for lk in fabric.compute_links())
        }
        if got != want or fabric.quarantined:
            print(f"  FAILED: parse disagrees with ground truth ({len(got)} vs {len(want)} links, "
                  f"{len(fabric.quarantined)} quarantined)", file=sys.stderr)  # fmt: skip
            return 1
        # every contender once per round, the order rotating over the rounds (bench/common.py)
        times = interleaved(
            {"full": lambda: parse_file(path), "records": lambda: _records(path), "floor": lambda: _floor(path)}, runs
        )
    print(f"ibnetdiscover parse: {spec_name}, {lines:,} lines, {size_mb:.1f} MB, {len(fabric.nodes):,} nodes, "
          f"{len(fabric.links):,} links ({runs} interleaved rounds)")  # fmt: skip
    for label, key in (("parse_file (records + links + classes)", "full"), ("iter_records (record stream only)",
                       "records"), ("peer: read + one regex per line", "floor")):  # fmt: skip
        rate = Spread.of([lines / t for t in times[key]])
        print(f"  {label + ':':<41}{rate.fmt(',.0f', ' lines/s')}")
    # lines/s of ours over the peer's = the peer's time over ours
    print(
        f"  {ratio_line('parse_file / peer speed', times['floor'], times['full'])} "
        "(the peer builds nothing; ours builds every record)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
