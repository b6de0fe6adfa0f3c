"""Loading ``gpufabric.yaml``: our loader against PyYAML alone, and the cost of refusing hostile files.

The speed side of ``tests/unit/test_settings.py`` (whose tests assert only outcomes). Every
contender runs once per round, the order rotating over the rounds (bench/common.py):

(a) a 5,000-switch site file through ``parse_settings`` (line tracking, alias limits, pydantic
    validation, secret references), against the peer: PyYAML's safe load of the same text, with
    libyaml's ``CSafeLoader`` when available -- the parse any YAML config loader pays before it
    checks anything;
(b) refusing hostile files -- a billion-laughs alias bomb, a merge-key bomb, 50,000 nested
    brackets, and ``/dev/zero`` -- each against loading the shipped example file: a refusal
    should cost about what a real config costs, never the expansion it refuses.

``python -m bench --only settings [--quick] [-- --rounds 9]``
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.common import Spread, interleaved, ratio_line

ROOT = Path(__file__).resolve().parents[1]


def _site(switches: int) -> str:
    lines = [
        "version: 1",
        "sources:",
        "  switch_defaults:",
        "    platform: sonic",
        "    snmp: {version: '3', user: ro, auth_protocol: SHA256, auth_key: {env: A},"
        " priv_protocol: AES256, priv_key: {env: P}}",
        "    ssh: {username: netops, password: {file: /run/secrets/ssh}}",
        "  switches:",
    ]
    for i in range(switches):
        lines += [f"    - name: sw-{i:05d}", f"      address: 10.{i // 65536}.{(i // 256) % 256}.{i % 256}"]
    return "\n".join(lines) + "\n"


def _refused(load: Callable[[], object]) -> Callable[[], None]:
    from settings import SettingsError

    def run() -> None:
        try:
            load()
        except SettingsError:
            return
        raise RuntimeError("a hostile file was accepted")

    return run


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench_settings", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 switches and 3 rounds")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--switches", type=int, default=None)
    args = parser.parse_args(list(argv))
    rounds = args.rounds or (3 if args.quick else 7)
    switches = args.switches or (1000 if args.quick else 5000)

    import yaml

    from settings import load_settings, parse_settings

    site = _site(switches)
    fastest = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's when PyYAML was built with it
    if len(parse_settings(site).sources.switches) != switches:
        print("  FAILED: the site file did not load every switch", file=sys.stderr)
        return 1
    example = ROOT / "gpufabric.example.yaml"
    laughs = "version: 1\na0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 10)
    )
    merge = "version: 1\nm0: &m0 {k0: v, k1: v}\n" + "".join(
        f"m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * 8)}], x{i}: v}}\n" for i in range(1, 12)
    )
    deep = "version: 1\nx: " + "[" * 50_000 + "]" * 50_000 + "\n"
    times = interleaved(
        {
            "ours": lambda: parse_settings(site),
            "yaml.safe_load": lambda: yaml.load(site, Loader=fastest),
            "example": lambda: load_settings(example),
            "billion laughs": _refused(lambda: parse_settings(laughs)),
            "merge bomb": _refused(lambda: parse_settings(merge)),
            "50,000 brackets": _refused(lambda: parse_settings(deep)),
            "/dev/zero": _refused(lambda: load_settings("/dev/zero")),
        },
        rounds,
    )
    print(
        f"settings loading: {switches:,}-switch site file ({len(site) / 1e3:,.0f} kB), {rounds} rounds; "
        f"peer: yaml.load with {fastest.__name__}"
    )
    print(f"  parse_settings:        {Spread.of(times['ours']).fmt('.3f', ' s')}")
    print(f"  PyYAML safe load (peer): {Spread.of(times['yaml.safe_load']).fmt('.3f', ' s')}")
    print(f"  {ratio_line('parse_settings / PyYAML safe load', times['ours'], times['yaml.safe_load'])}")
    print(f"  loading gpufabric.example.yaml: {Spread.of(times['example']).fmt('.4f', ' s')}")
    for name in ("billion laughs", "merge bomb", "50,000 brackets", "/dev/zero"):
        print(f"  refusing {name}: {Spread.of(times[name]).fmt('.4f', ' s')}; "
              f"{ratio_line('against loading the example', times[name], times['example'])}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
