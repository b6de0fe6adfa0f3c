"""The UFM client against the UFM REST twin over a real loopback socket, faults included."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from connectors.ibnetdiscover import parse_ibnetdiscover
from connectors.ufm import (
    UfmAuthError,
    UfmBadResponse,
    UfmClient,
    UfmConfig,
    UfmError,
    UfmNotFound,
    UfmTimeout,
    UfmUnreachable,
    to_fabric,
)
from simulator.generator import GroundTruth, generate
from simulator.ib.ibnetdiscover import render_lines
from simulator.ib.ufm import UfmTwinThread
from simulator.spec import load_spec
from simulator.specs import resolve_spec_path


@pytest.fixture(scope="module")
def truth() -> GroundTruth:
    return generate(load_spec(resolve_spec_path("h100-1su")))


@pytest.fixture(scope="module")
def twin(truth: GroundTruth) -> Iterator[UfmTwinThread]:
    with UfmTwinThread(truth) as t:
        yield t


@pytest.fixture(autouse=True)
def no_faults(twin: UfmTwinThread) -> Iterator[None]:
    yield
    httpx.post(f"{twin.url}/_twin/faults", json={"mode": None})


def fault(twin: UfmTwinThread, mode: str, times: int = -1, delay_s: float = 0.0) -> None:
    r = httpx.post(f"{twin.url}/_twin/faults", json={"mode": mode, "times": times, "delay_s": delay_s})
    assert r.status_code == 200


def basic(twin: UfmTwinThread, **kw: object) -> UfmConfig:
    base = {"base_url": twin.url, "auth": "basic", "username": "admin", "password": twin.password,
            "backoff_s": 0.01, "timeout_s": 5.0}  # fmt: skip
    return UfmConfig(**{**base, **kw})  # type: ignore[arg-type]


def key(lk) -> tuple[str, int, str, int, float | None, str | None]:  # type: ignore[no-untyped-def]
    return (lk.a_guid, lk.a_port, lk.b_guid, lk.b_port, lk.speed_gbps, lk.width)


def test_ufm_and_ibnetdiscover_resolve_the_same_links(twin: UfmTwinThread, truth: GroundTruth) -> None:
    with UfmClient(basic(twin)) as client:
        ufm = to_fabric(client.fetch(), "ufm")
    ibd = parse_ibnetdiscover(list(render_lines(truth)), "ibnetdiscover")
    assert ufm.quarantined == []
    assert {key(lk) for lk in ufm.compute_links()} == {key(lk) for lk in ibd.compute_links()}
    assert len(ufm.compute_links()) == 512
    assert {c.hostname for c in ufm.classes.values() if c.hostname} == {h.name for h in truth.hosts()}


def test_token_auth_and_paging_give_the_same_rows(twin: UfmTwinThread) -> None:
    token = UfmConfig(base_url=twin.url, auth="token", token=twin.token, rpp=100)
    with UfmClient(token) as client:
        paged = client.fetch()
        assert client.prefix == "/ufmRestV3"
        # 268 systems, 1024 ports, 512 links in pages of 100: 3 + 11 + 6 requests
        assert client.requests == 3 + 11 + 6
    with UfmClient(basic(twin)) as client:
        whole = client.fetch()
        assert client.requests == 3
    assert (len(paged.systems), len(paged.ports), len(paged.links)) == (268, 1024, 512)
    assert paged.systems == whole.systems and paged.links == whole.links


def test_wrong_password_and_auth_fault_fail_fast_without_retries(twin: UfmTwinThread) -> None:
    with UfmClient(basic(twin, password="wrong")) as client, pytest.raises(UfmAuthError, match="HTTP 401"):
        client.rows("systems")
    assert client.requests == 1
    fault(twin, "auth")
    with UfmClient(basic(twin)) as client, pytest.raises(UfmAuthError) as err:
        client.rows("systems")
    assert twin.password not in str(err.value)


def test_500s_and_truncated_json_are_retried_then_succeed(twin: UfmTwinThread) -> None:
    fault(twin, "500", times=2)
    with UfmClient(basic(twin, retries=3)) as client:
        assert len(client.rows("links")) == 512
        assert (client.requests, client.retried) == (3, 2)
    fault(twin, "truncated", times=1)
    with UfmClient(basic(twin, retries=3)) as client:
        assert len(client.rows("systems")) == 268
        assert client.retried == 1


def test_persistent_faults_end_in_a_clear_error(twin: UfmTwinThread) -> None:
    fault(twin, "500")
    with UfmClient(basic(twin, retries=2)) as client, pytest.raises(UfmError, match=r"HTTP 500 \(after 3 attempt"):
        client.rows("ports")
    fault(twin, "truncated")
    with UfmClient(basic(twin, retries=1)) as client, pytest.raises(UfmBadResponse, match="not valid JSON"):
        client.rows("ports")
    fault(twin, "slow", delay_s=1.0)
    with UfmClient(basic(twin, retries=1, timeout_s=0.2)) as client, pytest.raises(UfmTimeout, match=r"0\.2s"):
        client.rows("ports")
    fault(twin, "empty")
    with UfmClient(basic(twin)) as client, pytest.raises(UfmNotFound, match=r"200 \{\}"):
        client.rows("links")
    assert client.requests == 1


def test_unknown_resource_is_200_empty_and_unreachable_server(twin: UfmTwinThread) -> None:
    with UfmClient(basic(twin)) as client, pytest.raises(UfmNotFound):
        client.rows("nonsense")
    r = httpx.get(f"{twin.url}/ufmRest/resources/systems/0000", auth=("admin", twin.password))
    assert (r.status_code, r.json()) == (200, {})
    dead = UfmConfig(base_url="http://127.0.0.1:9", auth="basic", username="a", password="b", retries=1, backoff_s=0)
    with UfmClient(dead) as client, pytest.raises(UfmUnreachable, match="after 2 attempt"):
        client.rows("systems")


def test_tls_verification_is_on_by_default() -> None:
    cfg = UfmConfig(base_url="https://127.0.0.1:1", auth="token", token="t")
    assert cfg.verify_tls is True
    with UfmClient(cfg) as client:
        assert client._http._transport._pool._ssl_context.verify_mode.name == "CERT_REQUIRED"  # type: ignore[attr-defined]


def test_bad_rows_are_quarantined_not_fatal() -> None:
    from connectors.ufm import UfmFabric

    fabric = to_fabric(
        UfmFabric(
            systems=[
                {"guid": "b83fd20300000001", "type": "switch", "description": "MF0;l1:MQM9700/U1", "ports_count": 64},
                {"guid": "zz", "type": "switch"},
                {"guid": "b83fd20300000011", "type": "host", "description": "dgx001 mlx5_0"},
                {"guid": "b83fd20300000011", "type": "host", "description": "dup"},
                {"guid": "b83fd20300000012", "type": "toaster"},
            ],
            ports=[{"systemID": "b83fd20300000001", "number": 1, "active_speed": "NDR", "active_width": "4x"}],
            links=[
                {"source_guid": "b83fd20300000001", "source_port": "1", "destination_guid": "b83fd20300000011",
                 "destination_port": "1", "width": "IB_4x"},
                {"source_guid": "b83fd20300000001", "source_port": "2", "destination_guid": "b83fd203000000ff",
                 "destination_port": "1", "width": "IB_4x"},
                {"source_guid": "b83fd20300000001", "source_port": "x"},
            ],
        ),
        "ufm",
    )  # fmt: skip
    assert [q.reason.split(":")[0] for q in fabric.quarantined] == [
        "system without a usable GUID",
        "duplicate system GUID 0xb83fd20300000011",
        "unknown system type 'toaster'",
        "link end(s) 0xb83fd203000000ff are not UFM systems",
        "link without usable ends",
    ]
    assert [(lk.a_port, lk.speed, lk.speed_gbps) for lk in fabric.links] == [(1, "NDR", 400.0)]
