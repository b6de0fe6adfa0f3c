"""LLDP collection partitioned by switch group: one run (one Kubernetes Job under ``K8sRunLauncher``)
per group, with backfills and retries per group in the UI.

A *dynamic* partition set, filled by the ``switch_groups`` asset from the site file, rather than a
static one: the switches live in ``gpufabric.yaml``, which the code location reads at run time (a
test or an operator may point at another file), not at import; a static set would need the site
file at import time and a code reload for every switch added. Membership is a pure function of the
site's switch names and the group size (:mod:`core.lldp.groups`), so the run of ``group-003``
recomputes its switches from the same site file the sync asset read.

An *unpartitioned* run of a partitioned collection asset (``gpufabric run``, ``dg.materialize``
without a key) collects every switch in one process, as before partitions: the demo's path.
"""

import os
from collections.abc import Sequence
from typing import Any

import dagster as dg

from core.lldp.groups import (
    DEFAULT_SWITCHES_PER_GROUP,
    GroupError,
    check_size,
    describe,
    partition_changes,
    switch_groups,
)
from settings import Settings, Switch

PARTITION_SET = "switch_groups"  # the dynamic partition set's name in Dagster's instance
SWITCH_GROUPS = dg.DynamicPartitionsDefinition(name=PARTITION_SET)
# The group size must be the same wherever groups are computed (the sync asset, every partition's
# run pod); an environment variable reaches the code server and, through the chart's
# includeConfigInLaunchedRuns, every run pod.
SIZE_ENV = "GPUFABRIC_SWITCHES_PER_GROUP"


def switches_per_group(environ: Any = None) -> int:
    raw = (os.environ if environ is None else environ).get(SIZE_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_SWITCHES_PER_GROUP
    try:
        return check_size(int(raw))
    except ValueError:  # GroupError is a ValueError; int() raises one for junk
        raise GroupError(f"{SIZE_ENV}={raw!r}: switches per group must be an integer from 1 to 4096") from None


def site_groups(settings: Settings, size: int | None = None) -> dict[str, list[str]]:
    """Groups over every configured switch (SNMP, SSH or both), so a group names the same
    switches for both collectors."""
    return switch_groups((s.name for s in settings.sources.switches), size or switches_per_group())


def partition_keys_of(context: dg.AssetExecutionContext) -> list[str]:
    """The run's switch groups, or [] for an unpartitioned run (collect everything)."""
    if context.has_partition_key_range or context.has_partition_key:
        return list(context.partition_keys)
    return []


def switches_for_run(
    context: dg.AssetExecutionContext, settings: Settings, switches: Sequence[Switch]
) -> tuple[list[Switch], list[str]]:
    """``switches`` narrowed to the run's groups (all of them when unpartitioned), and the keys."""
    keys = partition_keys_of(context)
    if not keys:
        return list(switches), []
    groups = site_groups(settings)
    wanted: set[str] = set()
    for key in keys:
        if key not in groups:
            context.log.warning(
                "switch group %s is not in %s any more (%d groups now): nothing to collect for it; "
                "materialize switch_groups to drop it", key, settings.source_path, len(groups),
            )  # fmt: skip
        wanted.update(groups.get(key, []))
    return [s for s in switches if s.name in wanted], keys


@dg.asset(
    name="switch_groups",
    group_name="ethernet",
    kinds={"python"},
    description="The site's switches cut into fixed-size groups (natural name order); fills the "
    "switch_groups partition set of the LLDP collection assets, one run per group.",
)
def switch_groups_asset(context: dg.AssetExecutionContext, site: dg.ResourceParam[Settings]) -> dg.MaterializeResult:
    size = switches_per_group()
    groups = site_groups(site, size)
    instance = context.instance
    add, stale = partition_changes(list(groups), instance.get_dynamic_partitions(PARTITION_SET))
    if add:
        instance.add_dynamic_partitions(PARTITION_SET, add)
    for key in stale:
        instance.delete_dynamic_partition(PARTITION_SET, key)
    rows = [
        dg.TableRecord({"group": key, "switches": n, "first": first, "last": last})
        for key, n, first, last in describe(groups)
    ]
    return dg.MaterializeResult(
        metadata={
            "groups": dg.MetadataValue.int(len(groups)),
            "switches": dg.MetadataValue.int(sum(len(v) for v in groups.values())),
            "switches_per_group": dg.MetadataValue.int(size),
            "added": dg.MetadataValue.json(add),
            "removed": dg.MetadataValue.json(stale),
            "membership": dg.MetadataValue.table(
                rows,
                schema=dg.TableSchema(
                    columns=[
                        dg.TableColumn("group", "string"),
                        dg.TableColumn("switches", "int"),
                        dg.TableColumn("first", "string"),
                        dg.TableColumn("last", "string"),
                    ]
                ),
            ),
        }
    )


SWITCH_GROUPS_KEY = switch_groups_asset.key
