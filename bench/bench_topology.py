"""Topology derivation benchmark: ``core.topology.derive`` on the 16-SU B200 fabric.

What is measured, on the observations of ``b200-16su`` (512 nodes, 4,096 HCAs, 320 Quantum-2
switches with their SHARP nodes, 12,608 IB links, plus the DCIM inventory and NVLink domains;
``--quick``: ``h100-4su``), built exactly as the warehouse holds them (generated ibnetdiscover ->
parser -> the IB asset's rows -> the topology row adapters):

(a) ``derive``: identity resolution, tiers, rail groups, spine groups, pods, NVLink join, every
    finding, the model -- what the asset and ``gpufabric topology show`` run;
(b) the peer: the graph work any derivation has to do at least once, done by networkx alone --
    build an ``nx.Graph`` from the same IB links, then connected components and one
    multi-source BFS from the leaves. It says how close derivation is to "just walk the graph".

Reported: both times (median and spread over interleaved rounds) and the per-round ratio
(a)/(b), plus the ``ibnetdiscover`` parse of the same fabric
for scale. Every run checks the derived model against the ground truth (tiers, domains up to
renaming), so a derivation that got faster by being wrong fails loudly. The issue's budget is
under 10 s for (a) on b200-16su.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import networkx as nx

from bench.common import Spread, interleaved, ratio_line, spec_arguments
from core.topology import Observations, derive
from simulator.generator import generate
from simulator.ib.ibnetdiscover import render_lines
from simulator.spec import load_spec
from simulator.specs import resolve_spec_path


def _peer(obs: Observations) -> int:
    graph = nx.Graph()
    graph.add_edges_from((lk.a_guid, lk.b_guid) for lk in obs.ib_links if not lk.internal)
    switches = {n.guid for n in obs.ib_nodes if n.node_type == "switch"}
    hcas = {n.guid for n in obs.ib_nodes if n.node_class == "compute_hca"}
    leaves = {v for h in hcas if h in graph for v in graph[h] if v in switches}
    comps = list(nx.connected_components(graph))
    dist = nx.multi_source_dijkstra_path_length(graph.subgraph(switches), leaves)
    return len(comps) + len(dist)


def main(argv: Sequence[str]) -> int:
    spec_name, runs = spec_arguments("bench_topology", __doc__.splitlines()[0], argv)

    # The test helpers build observations through the real parsers and row adapters.
    from tests.unit.test_topology_support import assert_model_matches_truth, ib_rows, observe

    truth = generate(load_spec(resolve_spec_path(spec_name)))
    with tempfile.TemporaryDirectory() as tmp:
        obs = observe(truth, Path(tmp))
    try:
        assert_model_matches_truth(derive(obs), truth)
    except AssertionError as exc:
        print(f"  FAILED: derived model disagrees with ground truth: {exc}", file=sys.stderr)
        return 1
    lines = list(render_lines(truth))
    # every contender once per round, the order rotating over the rounds (bench/common.py)
    times = interleaved(
        {"derive": lambda: derive(obs), "peer": lambda: _peer(obs), "parse": lambda: ib_rows(lines)}, runs
    )
    switches = sum(1 for n in obs.ib_nodes if n.node_type == "switch")
    print(f"topology derivation: {spec_name}, {len(truth.spec.host_names)} hosts, {switches} IB switches, "
          f"{len(obs.ib_nodes):,} IB nodes, {len(obs.ib_links):,} IB links ({runs} interleaved rounds)")  # fmt: skip
    derive_s = Spread.of(times["derive"])
    print(f"  derive (resolution, tiers, domains, findings): {derive_s.fmt(unit=' s')}  (budget 10 s)")
    print(f"  peer: networkx graph + components + BFS:       {Spread.of(times['peer']).fmt(unit=' s')}")
    print(f"  for scale: parse ibnetdiscover to rows:        {Spread.of(times['parse']).fmt(unit=' s')}")
    print(f"  {ratio_line('derive / peer', times['derive'], times['peer'])}")
    t_derive = derive_s.median
    return 0 if t_derive < 10 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
