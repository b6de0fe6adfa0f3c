"""The UFM client against the UFM REST twin over real loopback TLS, faults included.

The twin serves HTTPS with a server certificate from a CA made for its run; the client trusts
that CA through ``ca_file``, as a site trusts its own UFM's CA.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors.ibnetdiscover import parse_ibnetdiscover
from connectors.ufm import (
    UfmAuthError,
    UfmBadResponse,
    UfmClient,
    UfmConfig,
    UfmError,
    UfmFabric,
    UfmNotFound,
    UfmTimeout,
    UfmTlsError,
    UfmUnreachable,
    to_fabric,
)
from simulator.generator import GroundTruth, generate
from simulator.ib.ibnetdiscover import render_lines
from simulator.ib.tls import issue_twin_tls
from simulator.ib.ufm import UfmTwinThread
from simulator.spec import load_spec
from simulator.specs import resolve_spec_path
from tests.unit.test_ufm_parser_fuzz import check_accounted, check_landable, page_bodies


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
    twin.set_fault(None)


def fault(twin: UfmTwinThread, mode: str, times: int = -1, delay_s: float = 0.0) -> None:
    twin.set_fault(mode, times=times, delay_s=delay_s)


def basic(twin: UfmTwinThread, **kw: object) -> UfmConfig:
    base = {"base_url": twin.url, "auth": "basic", "username": "admin", "password": twin.password,
            "ca_file": str(twin.ca_file), "backoff_s": 0.01, "timeout_s": 5.0}  # fmt: skip
    return UfmConfig(**{**base, **kw})  # type: ignore[arg-type]


def trusting(twin: UfmTwinThread) -> httpx.Client:
    """A bare HTTPS client that trusts the twin's CA and sends no credentials."""
    return httpx.Client(verify=ssl.create_default_context(cafile=twin.ca_file), timeout=5)


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
    token = UfmConfig(base_url=twin.url, auth="token", token=twin.token, ca_file=str(twin.ca_file), rpp=100)
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


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.one_of(st.binary(max_size=200), page_bodies.map(lambda b: json.dumps(b).encode())),
    rpp=st.sampled_from([None, 2]),
)
def test_any_answer_over_the_wire_is_rows_or_a_clear_error(twin: UfmTwinThread, body: bytes, rpp: int | None) -> None:
    """Whatever a broken or hostile UFM answers (the twin sends the bytes as given, every time):
    rows that then land or are quarantined, or a named error, in a bounded number of requests."""
    twin.set_fault("body", body=body)
    with UfmClient(basic(twin, retries=1, rpp=rpp)) as client:
        try:
            rows = client.rows("ports")
        except (UfmBadResponse, UfmNotFound) as exc:
            assert str(exc).startswith("GET /ufmRest/resources/ports: ")
            rows = None
        # Two attempts per page; paged, the second page repeats the first, which ends it.
        assert client.requests <= (2 if rpp is None else 4)
    if rows is not None:
        ufm = UfmFabric(systems=[], ports=rows, links=[])
        fabric = to_fabric(ufm, "wire")
        check_landable(fabric)
        check_accounted(fabric, ufm)


def test_a_server_that_ignores_page_number_is_caught(twin: UfmTwinThread) -> None:
    page = {"data": [{"systemID": "b83fd20300000001", "number": 1}] * 2, "pages_number": 10**9}
    twin.set_fault("body", body=json.dumps(page).encode())
    with UfmClient(basic(twin, rpp=2)) as client, pytest.raises(UfmBadResponse) as err:
        client.rows("ports")
    assert str(err.value) == "GET /ufmRest/resources/ports: page 2 repeats page 1 (page_number ignored?)"
    assert client.requests == 2


def test_unknown_resource_is_200_empty_and_unreachable_server(twin: UfmTwinThread) -> None:
    with UfmClient(basic(twin)) as client, pytest.raises(UfmNotFound):
        client.rows("nonsense")
    with trusting(twin) as http:
        r = http.get(f"{twin.url}/ufmRest/resources/systems/0000", auth=("admin", twin.password))
    assert (r.status_code, r.json()) == (200, {})
    dead = UfmConfig(base_url="https://127.0.0.1:9", auth="basic", username="a", password="b", retries=1, backoff_s=0)
    with UfmClient(dead) as client, pytest.raises(UfmUnreachable, match="after 2 attempt"):
        client.rows("systems")


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


# --- TLS and authentication ---------------------------------------------------------------------


def test_the_certificate_is_verified_by_default_against_the_system_trust_store(twin: UfmTwinThread) -> None:
    """No ca_file: the twin's run CA is in no system store, so the check fails, once, and says so."""
    cfg = basic(twin, ca_file=None)
    assert cfg.verify_tls is True
    with UfmClient(cfg) as client, pytest.raises(UfmTlsError) as err:
        client.rows("systems")
    assert client.tls_trust == "trusting the system trust store (no ca_file)"
    assert str(err.value) == (
        "GET /ufmRest/resources/systems: TLS certificate verification failed: unable to get local issuer "
        "certificate (trusting the system trust store (no ca_file))"
    )
    assert err.value.status == "auth_failure"
    assert client.requests == 1  # a certificate that fails now fails on every retry: none is made


def test_a_certificate_from_another_ca_is_refused(twin: UfmTwinThread, tmp_path: Path) -> None:
    other = issue_twin_tls(tmp_path / "other-ca", ca_name="some other CA")
    with UfmClient(basic(twin, ca_file=str(other.ca_cert))) as client, pytest.raises(UfmTlsError) as err:
        client.rows("systems")
    assert "TLS certificate verification failed: unable to get local issuer certificate" in str(err.value)
    assert f"trusting ca_file {other.ca_cert}" in str(err.value)


def test_both_names_in_the_certificate_verify(twin: UfmTwinThread) -> None:
    """The server certificate names 127.0.0.1 and localhost, so both URLs pass the host name check."""
    with UfmClient(basic(twin, base_url=f"https://localhost:{twin.port}")) as client:
        assert len(client.rows("systems")) == 268
    with UfmClient(basic(twin)) as client:
        assert len(client.rows("systems")) == 268
        assert client.tls_trust == f"trusting ca_file {twin.ca_file}"


def test_verify_tls_false_connects_without_checking(twin: UfmTwinThread) -> None:
    cfg = basic(twin, ca_file=None, verify_tls=False)
    with UfmClient(cfg) as client:
        assert len(client.rows("links")) == 512
        assert client.tls_trust == "verify_tls is false: the certificate is not checked"


@pytest.mark.parametrize(
    ("validity", "why"), [("expired", "certificate has expired"), ("not_yet_valid", "certificate is not yet valid")]
)
def test_a_certificate_outside_its_validity_is_refused(truth: GroundTruth, validity: str, why: str) -> None:
    with UfmTwinThread(truth, tls_validity=validity) as stale:  # type: ignore[arg-type]
        with UfmClient(basic(stale)) as client, pytest.raises(UfmTlsError) as err:
            client.rows("systems")
        assert f"TLS certificate verification failed: {why} (trusting ca_file {stale.ca_file})" in str(err.value)
        assert client.requests == 1
        # Same server, same CA, check off: it answers, so the refusal above was the validity check.
        with UfmClient(basic(stale, ca_file=None, verify_tls=False)) as client:
            assert len(client.rows("systems")) == 268


def test_an_unusable_ca_file_is_a_tls_error(twin: UfmTwinThread, tmp_path: Path) -> None:
    with pytest.raises(UfmTlsError, match=r"ca_file .*missing\.pem: cannot load CA certificates \(.*No such file"):
        UfmClient(basic(twin, ca_file=str(tmp_path / "missing.pem")))
    (tmp_path / "garbage.pem").write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    with pytest.raises(UfmTlsError, match=r"garbage\.pem: cannot load CA certificates"):
        UfmClient(basic(twin, ca_file=str(tmp_path / "garbage.pem")))


def test_plain_http_is_refused_before_any_credential_leaves(twin: UfmTwinThread) -> None:
    plain = basic(twin, base_url=f"http://127.0.0.1:{twin.port}", retries=0)
    with pytest.raises(UfmTlsError, match=r"refusing to send the basic credentials to http://127\.0\.0\.1:\d+ over"):
        UfmClient(plain)
    assert twin.password not in repr(plain)
    # A lab may allow it; the twin itself speaks no plain HTTP, so the request then fails there.
    lab = basic(twin, base_url=f"http://127.0.0.1:{twin.port}", retries=0, allow_plain_http=True)
    with UfmClient(lab) as client, pytest.raises(UfmUnreachable, match="RemoteProtocolError"):
        client.rows("systems")


def test_wrong_token_and_missing_credentials_are_401(twin: UfmTwinThread) -> None:
    wrong = UfmConfig(base_url=twin.url, auth="token", token="0" * 32, ca_file=str(twin.ca_file), backoff_s=0.01)
    with UfmClient(wrong) as client, pytest.raises(UfmAuthError, match=r"HTTP 401 \(check the token credentials\)"):
        client.rows("ports")
    assert client.requests == 1
    # The basic password does not open the token root, nor the token the basic one.
    swapped = UfmConfig(base_url=twin.url, auth="token", token=twin.password, ca_file=str(twin.ca_file))
    with UfmClient(swapped) as client, pytest.raises(UfmAuthError, match="HTTP 401"):
        client.rows("ports")
    with trusting(twin) as http:
        bare = http.get(f"{twin.url}/ufmRest/resources/systems")
        one = http.get(f"{twin.url}/ufmRestV3/resources/systems/0000")
        by_token = http.get(f"{twin.url}/ufmRest/resources/systems", headers={"Authorization": f"Basic {twin.token}"})
        control = http.post(f"{twin.url}/_twin/faults", json={"mode": "500"})
        stats = http.get(f"{twin.url}/_twin/stats", auth=("admin", twin.password))
    assert (bare.status_code, bare.headers["www-authenticate"]) == (401, 'Basic realm="UFM twin"')
    assert (one.status_code, by_token.status_code, control.status_code) == (401, 401, 401)
    assert stats.status_code == 200 and stats.json()["fault_hits"] == 0  # the refused fault was not set


def test_sim_up_site_file_points_at_https_with_the_run_ca(truth: GroundTruth, tmp_path: Path) -> None:
    """What `gpufabric sim up` writes for UFM is read by the asset's own collect(), over verified TLS."""
    from assets.infiniband.assets import collect
    from settings import parse_settings
    from simulator.ib.twins import start_ufm
    from simulator.twin import stop_pids
    from simulator.up import site_config

    run = start_ufm(truth, tmp_path / "ufm")
    try:
        text = site_config([run], "h100-1su")
        (entry,) = yaml.safe_load(text)["sources"]["fabric_managers"]
        assert entry["url"] == run.extra["url"] and entry["url"].startswith("https://127.0.0.1:")
        assert (entry["verify_tls"], entry["ca_file"]) == (True, str((tmp_path / "ufm" / "tls" / "ca.crt").resolve()))
        assert not (tmp_path / "ufm" / "tls" / "ca.key").exists()  # the CA key is never written
        (src,) = parse_settings(text, base_dir=tmp_path).sources.fabric_managers
        fabric, status, detail = collect(src)
        assert (status, detail, len(fabric.links), fabric.quarantined) == (None, None, 512, [])
        # The same entry with another CA: collect reports the failed check as an auth failure.
        other = issue_twin_tls(tmp_path / "other")
        fabric, status, detail = collect(src.model_copy(update={"ca_file": other.ca_cert}))
        assert (str(status), len(fabric.links)) == ("auth_failure", 0)
        assert detail is not None and "TLS certificate verification failed" in detail
    finally:
        stop_pids(run.pids)


def test_hostile_rows_land_in_the_warehouse_or_quarantine(warehouse, run_id: str) -> None:  # type: ignore[no-untyped-def]
    """Rows the warehouse could not hold (NUL, surrogates, out-of-range numbers, a self-loop, a
    repeated port) are escaped or quarantined by to_fabric, so the landing transaction succeeds."""
    from datetime import UTC, datetime

    from services.infiniband import land_fabric

    sw, host = "b83fd20300000001", "b83fd20300000011"
    fabric = to_fabric(
        UfmFabric(
            systems=[
                {"guid": sw, "type": "switch", "description": "MF0;l1:MQM9700/U1\x00", "ports_count": 2**40},
                {"guid": host, "type": "host", "description": "dgx001 mlx5_0 \ud800", "lid": 70000},
                ["not", "a", "row"],
            ],
            ports=[
                {"systemID": sw, "number": 1, "active_speed": "NDR", "active_width": "4x", "peer": f"{host}_1"},
                {"systemID": sw, "number": 1, "active_speed": "NDR", "active_width": "4x"},
                {"systemID": sw, "number": -3},
                {"systemID": host, "number": "1", "peer": "nonsense", "guid": "zz"},
            ],
            links=[
                {"source_guid": sw, "source_port": 1, "destination_guid": host, "destination_port": 1},
                {"source_guid": sw, "source_port": 2, "destination_guid": sw, "destination_port": 2},
                {"source_guid": sw, "source_port": 3, "destination_guid": host, "destination_port": 2, "speed": "XYZ"},
            ],
        ),
        "ufm-hostile",
    )  # fmt: skip
    with warehouse.connect() as conn:
        n_links, n_held = land_fabric(
            conn, run_id=run_id, kind="ufm", device="ufm-hostile", fabric=fabric, started_at=datetime.now(UTC)
        )
        nodes = conn.execute(
            "SELECT guid, port_count, description, lid FROM raw.ib_nodes WHERE run_id = %s ORDER BY guid", (run_id,)
        ).fetchall()
        ports = conn.execute(
            "SELECT node_guid, port, peer_guid, port_guid FROM raw.ib_ports WHERE run_id = %s ORDER BY 1, 2", (run_id,)
        ).fetchall()
        held = conn.execute(
            "SELECT location, reason FROM ops.quarantine WHERE run_id = %s ORDER BY location", (run_id,)
        ).fetchall()
    assert (n_links, n_held) == (1, 8)
    assert nodes == [
        (f"0x{sw}", 0, "MF0;l1:MQM9700/U1\\x00", None),
        (f"0x{host}", 0, "dgx001 mlx5_0 \\ud800", None),
    ]
    assert ports == [(f"0x{sw}", 1, f"0x{host}", None), (f"0x{host}", 1, "", None)]
    assert held == [
        ("links[1]", f"link from port 0x{sw} 2 to itself"),
        ("links[2]", "unknown link speed 'XYZ'"),
        ("ports[1]", f"duplicate port 0x{sw} 1"),
        ("ports[2]", "port without a usable system GUID or number: "
                     "number/port_number/dname -3 is outside 0..2147483647"),
        ("ports[3]", "port landed; peer 'nonsense' is not <guid>_<port> (left empty); "
                     "port GUID: not a 64-bit GUID: 'zz' (left empty)"),
        ("systems[0]", "system landed; description has NUL or unpaired surrogate characters (kept escaped); "
                       "ports_count/port_count 1099511627776 is outside 0..2147483647 (left empty)"),
        ("systems[1]", "system landed; description has NUL or unpaired surrogate characters (kept escaped); "
                       "lid 70000 is outside 0..65535 (left empty)"),
        ("systems[2]", "system row is a list, not an object"),
    ]  # fmt: skip
