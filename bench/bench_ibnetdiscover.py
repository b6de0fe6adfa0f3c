"""Parse benchmark: our ibnetdiscover parser against a bare regex scan of the same file.

What is measured, on the generated ibnetdiscover output of a 16-SU spec (``b200-16su``: 320
Quantum-2 switches with their SHARP aggregation nodes, 4,096 HCAs; ``--quick``: ``h100-4su``):

(a) ``parse_file``: the whole connector: streamed read, node/port records, link pairing,
    classification, findings -- what the asset and ``gpufabric ingest ibnetdiscover`` run;
(b) ``iter_records`` alone: the record stream, without link pairing or classification;
(c) the peer: the floor any Python parser of this format pays -- read the same file line by line
    and match each line against one precompiled regex, building nothing.

Reported: lines/s for each and the ratio (a)/(c): how much of the floor's speed the full parser
keeps. Each run checks the parse (links = ground truth, nothing quarantined), so a parser that
got faster by dropping lines fails loudly.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

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


def _best(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench_ibnetdiscover", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="h100-4su instead of b200-16su, one run")
    parser.add_argument("--spec", default=None, help="spec name (default b200-16su)")
    parser.add_argument("--runs", type=int, default=None)
    args = parser.parse_args(list(argv))
    spec_name = args.spec or ("h100-4su" if args.quick else "b200-16su")
    runs = args.runs or (1 if args.quick else 3)
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
        t_full = _best(lambda: parse_file(path), runs)
        t_records = _best(lambda: _records(path), runs)
        t_floor = _best(lambda: _floor(path), runs)
    full, recs, floor = lines / t_full, lines / t_records, lines / t_floor
    print(f"ibnetdiscover parse: {spec_name}, {lines:,} lines, {size_mb:.1f} MB, {len(fabric.nodes):,} nodes, "
          f"{len(fabric.links):,} links (best of {runs})")  # fmt: skip
    print(f"  parse_file (records + links + classes): {full:>12,.0f} lines/s  ({t_full:.3f} s)")
    print(f"  iter_records (record stream only):      {recs:>12,.0f} lines/s  ({t_records:.3f} s)")
    print(f"  peer: read + one regex per line:        {floor:>12,.0f} lines/s  ({t_floor:.3f} s)")
    print(f"  ratio parse_file / peer: {full / floor:.3f} (the peer builds nothing; ours builds every record)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
