"""InfiniBand fabric and NVLink domains into ``raw.ib_nodes``, ``raw.ib_ports``, ``raw.ib_links``
and ``raw.nvlink_domains``.

Thin by design: each configured fabric manager is read (UFM REST, a saved ibnetdiscover output or
the ibnetdiscover command on this host), parsed and classified by the connectors and
``core.infiniband``, and landed per source in one transaction: its nodes, ports and links, its
quarantined input and its ``ops.collection_status`` row, so status always agrees with what
landed. One unreachable UFM does not fail the run (fail soft); the asset's metadata counts every
status, every quarantined row and every node class (UFM servers, SHARP aggregation nodes,
unnamed HCAs ... are findings, not hosts).
No ``from __future__ import annotations`` here: Dagster reads the context annotation at runtime.
"""

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import urllib3
from kubernetes.client.exceptions import ApiException

from connectors.ibnetdiscover import IbFabric, IbnetdiscoverError, IbnetdiscoverTimeout, discover, parse_file
from connectors.nvlink import SOURCE as NVLINK_SOURCE
from connectors.nvlink import (
    NvlinkDomain,
    from_node_labels,
    parse_kubectl_nodes,
    parse_nmx_compute_nodes,
    parse_nvidia_smi,
)
from connectors.ufm import UfmClient, UfmConfig, UfmError, to_fabric
from connectors.warehouse import Warehouse, land_collection
from core.infiniband import HcaFilter
from core.quality import CollectionStatus, Parsed, Quarantined
from services.infiniband import land_fabric
from settings import FabricManagerSource, NvlinkSource, Settings, SettingsError

NVLINK_COLUMNS = (
    "run_id", "source", "collected_at", "node", "method", "domain", "cluster_uuid", "clique_id", "gpus", "detail",
)  # fmt: skip


def collect(src: FabricManagerSource) -> tuple[IbFabric, CollectionStatus | None, str | None]:
    """Read one fabric manager; failures become (empty fabric, status, detail), never exceptions."""
    hca_filter = HcaFilter.from_mapping(dict(src.host_classes))
    empty = IbFabric(source=src.name)
    if src.kind == "ibnetdiscover":
        try:
            if src.path is not None:
                return parse_file(Path(src.path), src.name, hca_filter), None, None
            return discover(timeout_s=src.timeout_s, source=src.name, hca_filter=hca_filter), None, None
        except IbnetdiscoverTimeout as exc:
            return empty, CollectionStatus.TIMEOUT, str(exc)
        except IbnetdiscoverError as exc:
            return empty, CollectionStatus.UNREACHABLE, str(exc)
    try:
        config = UfmConfig(
            base_url=str(src.url),
            auth=src.auth or "basic",
            username=src.username,
            password=src.password.resolve().get_secret_value() if src.password else None,
            token=src.token.resolve().get_secret_value() if src.token else None,
            verify_tls=src.verify_tls,
            ca_file=str(src.ca_file) if src.ca_file else None,
            allow_plain_http=src.allow_plain_http,
            timeout_s=src.timeout_s,
            retries=src.retries,
        )
        with UfmClient(config) as client:
            return to_fabric(client.fetch(), src.name, hca_filter), None, None
    except SettingsError as exc:
        return empty, CollectionStatus.AUTH_FAILURE, str(exc)
    except UfmError as exc:
        return empty, CollectionStatus(exc.status), str(exc)


@dg.multi_asset(
    specs=[
        dg.AssetSpec(["raw", "ib_nodes"], group_name="infiniband", kinds={"postgres"},
                     description="InfiniBand nodes (switches, HCAs) per source and run, classified."),
        dg.AssetSpec(["raw", "ib_ports"], group_name="infiniband", kinds={"postgres"},
                     description="InfiniBand port lines: peer GUID/port, lids, width and speed."),
        dg.AssetSpec(["raw", "ib_links"], group_name="infiniband", kinds={"postgres"},
                     description="InfiniBand links, both ends paired, per source and run."),
    ],
)  # fmt: skip
def ib_fabric(
    context: dg.AssetExecutionContext, warehouse: dg.ResourceParam[Warehouse], site: dg.ResourceParam[Settings]
) -> Iterator[dg.MaterializeResult]:
    settings = site
    run_id = context.run.run_id
    sources = settings.sources.fabric_managers
    if not sources:
        context.log.warning("no fabric managers configured (sources.fabric_managers in %s)", settings.source_path)
    statuses: Counter[str] = Counter()
    classes: Counter[str] = Counter()
    findings: Counter[str] = Counter()
    nodes = ports = links = held = 0
    with warehouse.connect() as conn:
        for src in sources:
            started = datetime.now(UTC)
            fabric, status, detail = collect(src)
            n_links, n_held = land_fabric(
                conn, run_id=run_id, kind=src.kind, device=src.name, fabric=fabric, started_at=started,
                status=status, detail=detail,
            )  # fmt: skip
            final = status or fabric.status
            context.log.info(
                "%s (%s): %s, %d nodes, %d links, %d quarantined%s",
                src.name, src.kind, final, len(fabric.nodes), n_links, n_held, f" ({detail or fabric.problem})"
                if (detail or fabric.problem) else "",
            )  # fmt: skip
            statuses[str(final)] += 1
            classes.update(c.node_class.value for c in fabric.classes.values())
            findings.update(f.kind for f in fabric.findings)
            nodes += len(fabric.nodes)
            ports += len(fabric.ports)
            links += n_links
            held += n_held
    common = {
        "sources": dg.MetadataValue.int(len(sources)),
        "sources_by_status": dg.MetadataValue.json(dict(statuses)),
        "rows_quarantined": dg.MetadataValue.int(held),
    }
    yield dg.MaterializeResult(
        asset_key=["raw", "ib_nodes"],
        metadata={**common, "nodes_landed": dg.MetadataValue.int(nodes),
                  "nodes_by_class": dg.MetadataValue.json(dict(classes)),
                  "findings_by_kind": dg.MetadataValue.json(dict(findings))},
    )  # fmt: skip
    yield dg.MaterializeResult(
        asset_key=["raw", "ib_ports"], metadata={**common, "ports_landed": dg.MetadataValue.int(ports)}
    )
    yield dg.MaterializeResult(
        asset_key=["raw", "ib_links"], metadata={**common, "links_landed": dg.MetadataValue.int(links)}
    )


# --- NVLink domains ---------------------------------------------------------------------------------


class NvlinkInput(dg.Config):
    """One input given at launch, on top of ``sources.nvlink`` in the site file (same fields)."""

    name: str
    kind: str
    path: str | None = None
    node: str | None = None
    cluster: str | None = None


class NvlinkDomainsConfig(dg.Config):
    inputs: list[NvlinkInput] = []


def read_cluster_labels(settings: Settings, cluster: str) -> dict[str, dict[str, str]]:
    """Node labels of a configured cluster, read through the Kubernetes API."""
    from connectors.kube import api_client, list_nodes

    source = next((k for k in settings.sources.kubernetes if k.name == cluster), None)
    if source is None:
        raise ValueError(f"cluster {cluster!r} is not a sources.kubernetes name")
    with api_client(source) as api:
        return {
            str(n.metadata.name): dict(n.metadata.labels or {}) for n in list_nodes(api) if n.metadata is not None
        }


def parse_nvlink_input(item: NvlinkInput | NvlinkSource, settings: Settings | None = None) -> Parsed[NvlinkDomain]:
    if item.kind == "kubernetes":
        if settings is None or not item.cluster:
            raise ValueError("kind kubernetes needs cluster: a sources.kubernetes name")
        return from_node_labels(read_cluster_labels(settings, item.cluster), item.name)
    if item.path is None:
        raise ValueError(f"kind {item.kind} needs path (a saved file)")
    text = Path(item.path).read_text(encoding="utf-8", errors="backslashreplace")
    if item.kind == "gfd_labels":
        return parse_kubectl_nodes(text, item.name)
    if item.kind == "nmx":
        return parse_nmx_compute_nodes(text, item.name)
    if item.kind == "nvidia_smi":
        if not item.node:
            raise ValueError("kind nvidia_smi needs node: the host the csv was taken on")
        return parse_nvidia_smi(item.node, text, item.name)
    raise ValueError(f"unknown NVLink input kind {item.kind!r} (kubernetes, gfd_labels, nvidia_smi, nmx)")


def nvlink_rows(run_id: str, source: str, at: datetime, records: list[NvlinkDomain]) -> Iterator[tuple[Any, ...]]:
    for r in records:
        yield (run_id, source, at, r.node, r.method, r.domain, r.cluster_uuid, r.clique_id, r.gpus, r.detail)


@dg.asset(
    key_prefix=["raw"],
    group_name="infiniband",
    kinds={"postgres"},
    description="NVLink domain of every node: GFD clique label, nvidia-smi fabric fields or NMX compute nodes.",
)
def nvlink_domains(
    context: dg.AssetExecutionContext,
    config: NvlinkDomainsConfig,
    warehouse: dg.ResourceParam[Warehouse],
    site: dg.ResourceParam[Settings],
) -> dg.MaterializeResult:
    run_id = context.run.run_id
    settings = site
    inputs: list[NvlinkInput | NvlinkSource] = [*settings.sources.nvlink, *config.inputs]
    statuses: Counter[str] = Counter()
    methods: Counter[str] = Counter()
    landed = held = 0
    with warehouse.connect() as conn:
        for item in inputs:
            started = datetime.now(UTC)
            detail = None
            try:
                parsed = parse_nvlink_input(item, settings)
                status = parsed.status
            except (OSError, ApiException, urllib3.exceptions.HTTPError) as exc:
                parsed, status, detail = Parsed(), CollectionStatus.UNREACHABLE, f"{type(exc).__name__}: {exc}"
            except ValueError as exc:
                parsed = Parsed(quarantined=[Quarantined(NVLINK_SOURCE, str(exc), str(item.path), item.name)])
                status, detail = CollectionStatus.INVALID, str(exc)
            n, q = land_collection(
                conn, run_id=run_id, source=NVLINK_SOURCE, device=item.name, table="raw.nvlink_domains",
                columns=NVLINK_COLUMNS, rows=nvlink_rows(run_id, item.name, started, parsed.records),
                quarantined=parsed.quarantined, status=status, started_at=started, detail=detail,
            )  # fmt: skip
            statuses[str(status)] += 1
            methods.update(r.method for r in parsed.records)
            landed += n
            held += q
    return dg.MaterializeResult(
        metadata={
            "nodes_landed": dg.MetadataValue.int(landed),
            "rows_quarantined": dg.MetadataValue.int(held),
            "inputs_by_status": dg.MetadataValue.json(dict(statuses)),
            "nodes_by_method": dg.MetadataValue.json(dict(methods)),
        }
    )


defs = dg.Definitions(assets=[ib_fabric, nvlink_domains])
