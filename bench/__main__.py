"""Run the benchmarks: ``python -m bench [--only NAME] [--quick] [-- EXTRA ARGS]`` (``make bench``).

Every ``bench/bench_<name>.py`` with a ``main(argv) -> int`` is a benchmark; it is found by file
name, so adding one needs no registry here. Each prints its own figures and its ratio against a
peer measured in the same run (the project's standard on speed: no timing assertions in tests).

The benchmarks get their own embedded server (``.data/bench``, preferred port 54349), set here
before any of our modules is imported, so a run never truncates the demo's or the tests' data.
``GPUFABRIC_DATABASE_URL``, when set, points them at that database instead.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent

os.environ["GPUFABRIC_DATA_DIR"] = str(ROOT / ".data" / "bench")
os.environ["GPUFABRIC_PG_PORT"] = "54349"


def discover() -> dict[str, str]:
    """Benchmark name (``copy_loader``) -> module (``bench.bench_copy_loader``), sorted by name."""
    return {path.stem.removeprefix("bench_"): f"bench.{path.stem}" for path in sorted(BENCH_DIR.glob("bench_*.py"))}


def _parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    argv = list(argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="Run the benchmarks; each prints its ratio against a peer."
    )
    parser.add_argument(
        "--only", action="append", metavar="NAME", help="run only this benchmark (repeatable), e.g. copy_loader"
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    return parser.parse_args(argv), extra


def main(argv: Sequence[str] | None = None) -> int:
    """Run the selected benchmarks one after another; non-zero if any failed."""
    args, extra = _parse(sys.argv[1:] if argv is None else argv)
    available = discover()
    if args.list:
        print("\n".join(available))
        return 0
    selected = list(available)
    if args.only:
        wanted = [name.removeprefix("bench_") for name in args.only]
        unknown = [name for name in wanted if name not in available]
        if unknown:
            print(f"unknown benchmark(s): {', '.join(unknown)}; available: {', '.join(available)}", file=sys.stderr)
            return 2
        selected = wanted
    if not selected:
        print("no benchmarks found in bench/ (bench_*.py)", file=sys.stderr)
        return 2

    bench_argv = (["--quick"] if args.quick else []) + extra
    outcomes: list[tuple[str, int, float]] = []
    for name in selected:
        print(f"\n=== {name} ({available[name]}) {'=' * max(0, 70 - len(name) - len(available[name]))}", flush=True)
        start = time.perf_counter()
        try:
            module = importlib.import_module(available[name])
            status = int(module.main(bench_argv))
        except SystemExit as stop:  # argparse in a benchmark rejecting its arguments
            status = stop.code if isinstance(stop.code, int) else 1
        except Exception:  # one broken benchmark must not hide the others' figures
            traceback.print_exc()
            status = 1
        outcomes.append((name, status, time.perf_counter() - start))

    print("\n=== summary " + "=" * 68)
    for name, status, elapsed in outcomes:
        print(f"  {name:<24} {'ok' if status == 0 else f'FAILED (exit {status})':<18} {elapsed:7.1f}s")
    print(f"  command: {shlex.join(sys.orig_argv)}")
    return 0 if all(status == 0 for _, status, _ in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
