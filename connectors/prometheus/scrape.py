"""Scrape many dcgm-exporter ``/metrics`` endpoints concurrently (httpx, asyncio).

One unreachable or broken exporter never fails the others: every target comes back as a
:class:`ScrapeResult` with its status (ok, timeout, unreachable, error) and, when it answered, the
body and the moment the answer arrived, which stamps its samples (dcgm-exporter sends no
timestamps; Prometheus does the same).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from core.quality import CollectionStatus

# dcgm-exporter serves text format 0.0.4; asking for it explicitly keeps a future default to
# OpenMetrics or protobuf from changing what we parse.
ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
MAX_BODY_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ScrapeResult:
    target: str
    status: CollectionStatus
    body: bytes | None = None
    scraped_at_ms: int | None = None
    detail: str | None = None
    elapsed_s: float = 0.0


class TargetsError(ValueError):
    """A Prometheus file_sd targets file that cannot be read; the message names the problem."""


def read_targets_file(path: Path) -> list[str]:
    """URLs from a Prometheus ``file_sd`` file (JSON or YAML): ``[{targets: [host:port], labels}]``.

    ``__scheme__`` and ``__metrics_path__`` labels are honoured as Prometheus does.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise TargetsError(f"cannot read targets file {path}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise TargetsError(f"{path}: not UTF-8 text (byte {err.start})") from None
    try:
        data: Any = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError, RecursionError) as err:  # RecursionError: JSON nested too deeply
        raise TargetsError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {err}") from None
    if not isinstance(data, list):
        raise TargetsError(f"{path}: expected a list of {{targets: [...], labels: {{...}}}} groups")
    urls: list[str] = []
    for i, group in enumerate(data):
        if not isinstance(group, dict) or not isinstance(group.get("targets"), list):
            raise TargetsError(f"{path}: group {i} has no 'targets' list")
        labels = group.get("labels") or {}
        if not isinstance(labels, dict):
            raise TargetsError(f"{path}: group {i} has 'labels' that are not a mapping")
        scheme = labels.get("__scheme__", "http")
        metrics_path = labels.get("__metrics_path__", "/metrics")
        if not isinstance(scheme, str) or not isinstance(metrics_path, str):
            raise TargetsError(f"{path}: group {i} has a __scheme__ or __metrics_path__ that is not text")
        for target in group["targets"]:
            if not isinstance(target, str) or not target:
                raise TargetsError(f"{path}: group {i} has a target that is not host:port")
            urls.append(f"{scheme}://{target}{metrics_path}")
    return urls


async def _scrape_one(client: httpx.AsyncClient, url: str, sem: asyncio.Semaphore, timeout_s: float) -> ScrapeResult:
    async with sem:
        start = time.perf_counter()
        try:
            async with client.stream("GET", url, timeout=timeout_s) as response:
                if response.status_code != 200:
                    return ScrapeResult(
                        url,
                        CollectionStatus.ERROR,
                        detail=f"HTTP {response.status_code}",
                        elapsed_s=time.perf_counter() - start,
                    )
                chunks: list[bytes] = []
                size = 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > MAX_BODY_BYTES:
                        return ScrapeResult(
                            url, CollectionStatus.ERROR, detail=f"body larger than {MAX_BODY_BYTES} bytes"
                        )
                    chunks.append(chunk)
                return ScrapeResult(
                    url,
                    CollectionStatus.OK,
                    body=b"".join(chunks),
                    scraped_at_ms=int(time.time() * 1000),
                    elapsed_s=time.perf_counter() - start,
                )
        except httpx.TimeoutException:
            return ScrapeResult(url, CollectionStatus.TIMEOUT, detail=f"no answer within {timeout_s:g}s",
                                elapsed_s=time.perf_counter() - start)
        except httpx.TransportError as err:
            return ScrapeResult(url, CollectionStatus.UNREACHABLE, detail=f"{type(err).__name__}: {err}",
                                elapsed_s=time.perf_counter() - start)


async def scrape_async(urls: Sequence[str], *, concurrency: int = 64, timeout_s: float = 10.0) -> list[ScrapeResult]:
    sem = asyncio.Semaphore(max(1, concurrency))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, headers={"Accept": ACCEPT}, trust_env=False) as client:
        return list(await asyncio.gather(*(_scrape_one(client, u, sem, timeout_s) for u in urls)))


def scrape(urls: Sequence[str], *, concurrency: int = 64, timeout_s: float = 10.0) -> list[ScrapeResult]:
    """Scrape every URL once, concurrently; results in the order of ``urls``."""
    return asyncio.run(scrape_async(urls, concurrency=concurrency, timeout_s=timeout_s))
