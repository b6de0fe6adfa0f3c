"""``python -m controllers reaper`` (the orphan reaper loop, dry-run unless ``--no-dry-run``),
``python -m controllers budget-reconciler`` (the budget enforcement loop, dry-run unless
``--no-dry-run``, its config from the site file's ``budget:`` section),
``python -m controllers budget-webhook`` (the budget admission webhook),
``python -m controllers topology-webhook`` (the Kueue topology admission webhook) and
``python -m controllers burst-admission`` (releases gated burst pods that fit, Lease-elected)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from http.server import ThreadingHTTPServer

    from controllers.budget_reconciler import BudgetReconciler
    from controllers.reaper import Reaper



def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # The webhooks have their own flags (cert, key, port, workers); hand the rest of the line over.
    if argv[:1] == ["topology-webhook"]:
        from controllers.topology_webhook import main as webhook_main

        return webhook_main(argv[1:])
    if argv[:1] == ["budget-webhook"]:
        from controllers.budget_webhook import main as budget_webhook_main

        return budget_webhook_main(argv[1:])
    if argv[:1] == ["burst-admission"]:
        from controllers.burst_admission import main as burst_admission_main

        return burst_admission_main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m controllers",
        epilog="also: python -m controllers topology-webhook --help, python -m controllers budget-webhook --help, "
        "python -m controllers burst-admission --help",
    )
    sub = parser.add_subparsers(dest="controller", required=True)
    reaper = sub.add_parser("reaper", help="delete pods orphaned by crashed agent orchestrators")
    reaper.add_argument("--kubeconfig", type=Path)
    reaper.add_argument("--in-cluster", action="store_true")
    reaper.add_argument("--no-dry-run", action="store_true", help="actually delete (default: audit only)")
    reaper.add_argument("--period", type=_positive, default=5.0, help="seconds between passes")
    reaper.add_argument("--grace", type=float, default=30.0)
    reaper.add_argument("--cap", type=int, default=200)
    reaper.add_argument("--prefix", default="gpufabric.io")
    reaper.add_argument("--namespace")
    reaper.add_argument("--health-port", type=_port, default=0, help="serve /healthz and /readyz here (0: off)")
    budget = sub.add_parser(
        "budget-reconciler",
        help="stop agent trees whose measured spend crossed their envelope",
        description="Enforcement loop of the agent-tree budget controller. Reads the budget: section of the "
        "site file; dry run (plan and audit, change nothing) unless --no-dry-run.",
    )
    budget.add_argument("--config", type=Path, help="site file (default: $GPUFABRIC_CONFIG, else ./gpufabric.yaml)")
    budget.add_argument("--kubeconfig", type=Path)
    budget.add_argument("--context")
    budget.add_argument("--in-cluster", action="store_true")
    budget.add_argument("--no-dry-run", action="store_true", help="actually stop trees (default: audit only)")
    budget.add_argument("--alert-only", action="store_true", help="record alerts only (overrides the site file)")
    budget.add_argument("--period", type=_positive, help="seconds between passes (default: budget.reconciler.period_s)")
    budget.add_argument(
        "--stop-deadline", type=_positive_int, help="activeDeadlineSeconds when stopping (default: the site file)"
    )
    budget.add_argument("--once", action="store_true", help="run one pass and exit")
    budget.add_argument("--health-port", type=_port, default=0, help="serve /healthz and /readyz here (0: off)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)  # migrations at start-up: only problems matter
    if args.controller == "budget-reconciler":
        return _budget_reconciler(args)
    return _reaper(args)


class _StopOnSignals:
    """SIGTERM and SIGINT (even one inherited as ignored) stop the loop handed to :meth:`attach`,
    or, before there is one, are remembered so start-up ends with exit 0 instead of a kill."""

    def __init__(self) -> None:
        self.requested: list[int] = []
        self._loop: Reaper | BudgetReconciler | None = None
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.requested.append(signum)
        if self._loop is not None:
            self._loop.stop()

    def attach(self, loop: Reaper | BudgetReconciler) -> None:
        self._loop = loop
        if self.requested:  # asked to stop while starting up
            loop.stop()


def _reaper(args: argparse.Namespace) -> int:
    """The reaper loop until SIGTERM or SIGINT, then exit 0; bad set-up is one message, no traceback.

    The handlers go in before anything slow (imports, migrations), so a stop during start-up is
    a stop, not a kill; SIGINT is handled even when inherited as ignored (a background job of a
    non-interactive shell), because a controller asked to stop must stop.
    """
    stop = _StopOnSignals()
    log = logging.getLogger("gpufabric.reaper")

    from kubernetes.config import ConfigException

    from connectors.kube import ClusterTarget, api_client
    from connectors.warehouse import WarehouseError, open_warehouse
    from connectors.warehouse.ledger import envelope_root_states
    from controllers.reaper import Reaper
    from core.orphans import OrphanPolicy

    try:
        policy = OrphanPolicy(prefix=args.prefix, grace_s=args.grace, max_deletes_per_pass=args.cap)
    except ValueError as err:
        print(f"reaper: {err}", file=sys.stderr)
        return 2
    try:
        api = api_client(ClusterTarget(kubeconfig=args.kubeconfig, in_cluster=args.in_cluster))
    except (ConfigException, OSError) as err:
        print(f"reaper: cannot reach Kubernetes: {err}", file=sys.stderr)
        return 2
    try:
        warehouse = open_warehouse()
    except WarehouseError as err:
        print(f"reaper: cannot open the warehouse: {err}", file=sys.stderr)
        return 1
    loop = Reaper(
        api,
        warehouse,
        policy,
        roots=envelope_root_states(warehouse),  # roots the budget controller stopped
        dry_run=not args.no_dry_run,
        period_s=args.period,
        namespace=args.namespace,
    )
    probes = _probes(loop, args.health_port)
    stop.attach(loop)
    mode = "dry run" if loop.dry_run else "deleting"
    log.info("orphan reaper started (%s, every %ss, grace %ss, at most %d deletes per pass)", mode, loop.period_s,
             policy.grace_s, policy.max_deletes_per_pass)
    try:
        loop.run()
    finally:
        if probes is not None:
            probes.shutdown()
        api.close()
        warehouse.dispose()
    log.info("orphan reaper stopped after %d passes (%d failed)", loop.passes, loop.errors)
    return 0


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return value


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} must be a port number from 0 to 65535")
    return int(text)


def _probes(loop: Reaper | BudgetReconciler, port: int) -> ThreadingHTTPServer | None:
    """Give the loop a heartbeat and, with a port, serve the kubelet's probes from it."""
    if not port:
        return None
    from controllers.health import Heartbeat, serve

    loop.heartbeat = Heartbeat(period_s=loop.period_s)
    return serve(loop.heartbeat, port)


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive whole number")
    return int(text)


def _budget_reconciler(args: argparse.Namespace) -> int:
    """Load the site file first: a bad file is one clear message and exit 2, never a traceback.
    Stop handlers go in before anything slow, as for the reaper (a stop during start-up is a stop)."""
    stop = _StopOnSignals()

    from dataclasses import replace

    from kubernetes.config import ConfigException

    from connectors.kube import ClusterTarget, api_client
    from connectors.warehouse import WarehouseError, open_warehouse
    from controllers.budget_reconciler import BudgetReconciler
    from settings import SettingsError, load_budget_config

    try:
        settings, config = load_budget_config(args.config)
    except SettingsError as err:
        print(f"budget-reconciler: the site file cannot be used:\n{err}", file=sys.stderr)
        return 2
    if args.alert_only:
        config = replace(config, alert_only=True)
    try:
        api = api_client(ClusterTarget(kubeconfig=args.kubeconfig, context=args.context, in_cluster=args.in_cluster))
    except (ConfigException, OSError) as err:
        print(f"budget-reconciler: cannot reach Kubernetes: {err}", file=sys.stderr)
        return 2
    try:
        database_url = open_warehouse().libpq_url
    except WarehouseError as err:
        print(f"budget-reconciler: cannot open the warehouse: {err}", file=sys.stderr)
        return 1
    options = settings.budget.reconciler
    loop = BudgetReconciler(
        api,
        database_url,
        config,
        dry_run=not args.no_dry_run,
        period_s=args.period if args.period is not None else options.period_s,
        deadline_s=args.stop_deadline if args.stop_deadline is not None else options.stop_deadline_s,
    )
    mode = "dry run" if loop.dry_run else "alert only" if config.alert_only else "enforcing"
    logging.getLogger("gpufabric.budget").info(
        "budget reconciler started (%s, every %ss, site file %s)", mode, loop.period_s, settings.source_path
    )
    stop.attach(loop)
    if stop.requested:  # asked to stop while starting up
        api.close()
        return 0
    if args.once:
        result = loop.run_pass()
        api.close()
        return 0 if result is not None else 1
    probes = _probes(loop, args.health_port)
    try:
        loop.run()
    finally:
        if probes is not None:
            probes.shutdown()
        api.close()
    logging.getLogger("gpufabric.budget").info("budget reconciler stopped after %d passes", loop.passes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
