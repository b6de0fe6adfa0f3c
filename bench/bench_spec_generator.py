"""Ground-truth generation: ``simulator.generator.generate`` against rebuilding the same objects.

The speed side of ``tests/unit/test_spec_generator.py`` (whose tests assert only what is
generated). ``generate`` turns a cluster spec into every device, port and link of the fabric
(b200-16su: 512 nodes, 4,096 HCAs, 320 switches, ~25,000 links; ``--quick``: h100-4su). The peer
is ``pickle.loads`` of the very same ground truth: materialising the identical object graph with
no wiring logic at all, so the ratio says what the fat-tree wiring, identities and defects cost
on top of building the objects. Both run once per round, the order rotating (bench/common.py);
each round's truth is checked equal to the first, so a faster but different generator fails.

``python -m bench --only spec_generator [--quick] [-- --runs 7]``
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Sequence

from bench.common import Spread, interleaved, ratio_line, spec_arguments


def main(argv: Sequence[str]) -> int:
    spec_name, runs = spec_arguments("bench_spec_generator", __doc__.splitlines()[0], argv)
    from simulator.generator import generate
    from simulator.spec import load_spec
    from simulator.specs import resolve_spec_path

    spec = load_spec(resolve_spec_path(spec_name))
    reference = generate(spec)
    frozen = pickle.dumps(reference, protocol=pickle.HIGHEST_PROTOCOL)

    def ours() -> None:
        if generate(spec) != reference:
            raise RuntimeError("generation is not deterministic")

    times = interleaved({"generate": ours, "pickle.loads": lambda: pickle.loads(frozen)}, runs)
    print(f"ground truth of {spec_name}: {len(reference.devices):,} devices, {len(reference.ports):,} ports, "
          f"{len(reference.links):,} links ({runs} rounds)")  # fmt: skip
    print(f"  generate:             {Spread.of(times['generate']).fmt('.3f', ' s')} (the test's old bound: 2.5 s)")
    print(f"  pickle.loads (peer):  {Spread.of(times['pickle.loads']).fmt('.3f', ' s')}")
    print(f"  {ratio_line('generate / pickle.loads', times['generate'], times['pickle.loads'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
