"""The orphan reaper as a Dagster sensor: the same rule and pass as ``controllers/reaper.py``.

No ``from __future__ import annotations`` here: Dagster reads the context annotation at runtime.

For sites that run the pipeline but not the controller. The sensor runs one pass per configured
``sources.kubernetes`` cluster each tick (dry-run unless the ``orphan_reaper`` resource says
otherwise), writes every decision to ``agents.reaper_audit`` with ``controller = 'sensor'``, and
launches no run: the tick's skip message is the summary (deleted, would delete, GPUs held by
orphans). A cluster that cannot be read is reported in the message and left alone.
"""

import dagster as dg

from connectors.kube import api_client
from connectors.kube.agents import reap_once
from connectors.warehouse import Warehouse, copy_rows
from connectors.warehouse.ledger import envelope_root_states
from core.orphans import AUDIT_COLUMNS, AUDIT_TABLE, Action, OrphanPolicy, Verdict, audit_rows
from settings import Settings


class OrphanReaperResource(dg.ConfigurableResource):
    """The reaper's knobs for the sensor. Dry-run by default: deleting is an explicit decision."""

    dry_run: bool = True
    grace_s: float = 30.0
    startup_grace_s: float = 120.0
    delete_grace_s: int = 30
    max_deletes_per_pass: int = 200
    max_orphan_share: float = 0.9

    def policy(self, prefix: str) -> OrphanPolicy:
        return OrphanPolicy(
            prefix=prefix,
            grace_s=self.grace_s,
            startup_grace_s=self.startup_grace_s,
            delete_grace_s=self.delete_grace_s,
            max_deletes_per_pass=self.max_deletes_per_pass,
            max_orphan_share=self.max_orphan_share,
        )


def reap_clusters(settings: Settings, warehouse: Warehouse, reaper: OrphanReaperResource) -> str:
    """One pass per cluster; the human summary of what happened."""
    policy = reaper.policy(settings.label_prefix)
    parts: list[str] = []
    for source in settings.sources.kubernetes:
        api = api_client(source)
        try:
            report = reap_once(api, policy, roots=envelope_root_states(warehouse), dry_run=reaper.dry_run)
        except Exception as exc:  # one unreachable cluster must not hide the others
            parts.append(f"{source.name}: not read ({type(exc).__name__}), nothing done")
            continue
        finally:
            api.close()
        rows = audit_rows(report.decisions, pass_id=report.pass_id, controller="sensor", dry_run=reaper.dry_run)
        if rows:
            with warehouse.connect() as conn, conn.transaction():
                copy_rows(conn, AUDIT_TABLE, AUDIT_COLUMNS, rows)
        orphans = [f for f in report.findings if f.verdict is Verdict.ORPHANED]
        parts.append(
            f"{source.name}: {len(orphans)} orphaned ({sum(f.gpus_held for f in orphans)} GPUs held), "
            f"{report.count(Action.DELETED)} deleted, {report.count(Action.WOULD_DELETE)} would delete, "
            f"{report.count(Action.DEFERRED)} deferred, {report.count(Action.SKIPPED)} skipped"
            + (f"; {report.refused}" if report.refused else "")
        )
    return "; ".join(parts) or "no sources.kubernetes configured"


@dg.sensor(
    name="orphan_reaper",
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.STOPPED,
    description="Find and (unless dry-run) delete pods orphaned by crashed agent orchestrators.",
)
def orphan_reaper(
    context: dg.SensorEvaluationContext,
    site: dg.ResourceParam[Settings],
    warehouse: dg.ResourceParam[Warehouse],
    orphan_reaper: OrphanReaperResource,
) -> dg.SkipReason:
    summary = reap_clusters(site, warehouse, orphan_reaper)
    context.log.info(summary)
    return dg.SkipReason(summary)


defs = dg.Definitions(sensors=[orphan_reaper], resources={"orphan_reaper": OrphanReaperResource()})
