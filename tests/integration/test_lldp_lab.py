"""A real LLDP lab: network namespaces joined by veth pairs, real lldpd everywhere and real net-snmp
snmpd (lldpd as its AgentX subagent) on each switch. The collector walks those agents; the rows the
asset lands, resolved by the production code (``core.topology.ethernet.resolve_ethernet``), must
equal the lab's wiring -- with real indexes (nonzero time marks, local port = ifIndex, remote
indexes not 1), not the twin's.

Topology: spine s1; leaves l1, l2 (each one uplink to s1); hosts h1-h8 (h1-h4 on l1, h5-h8 on l2).
Each switch namespace also has a management veth to the root namespace (10.199.N.0/30) where snmpd
listens. Needs root and ``ip netns``; everything is torn down in a finally, even on failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr
from snmp.support import derived_links, snmp_observations

from connectors.snmp import CollectorOptions, SnmpTarget, collect
from core.quality import CollectionStatus
from core.topology.ethernet import normalise_mac, resolve_ethernet
from core.topology.inputs import HostnameRules

pytestmark = pytest.mark.standalone  # starts what it needs itself (tests/conftest.py: the scheduler)

SWITCHES = ("s1", "l1", "l2")
HOSTS = tuple(f"h{i}" for i in range(1, 9))
# (device, ifname) pairs: the lab's wiring, the ground truth of this test
WIRING: tuple[tuple[tuple[str, str], tuple[str, str]], ...] = (
    (("l1", "swp49"), ("s1", "swp1")),
    (("l2", "swp49"), ("s1", "swp2")),
    *((((f"h{i}", "eno1"), ("l1", f"swp{i}"))) for i in range(1, 5)),
    *((((f"h{i}", "eno1"), ("l2", f"swp{i - 4}"))) for i in range(5, 9)),
)
WAIT_S = 40.0


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=check)


def _lab_available() -> str | None:
    missing = [t for t in ("ip", "lldpd", "lldpcli", "snmpd") if shutil.which(t) is None]
    if missing:
        return f"missing tools: {', '.join(missing)} (system-packages/snmp.txt)"
    if os.geteuid() != 0:
        return "the LLDP lab needs root for network namespaces"
    return None


class Lab:
    def __init__(self, root: Path) -> None:
        self.tag = uuid.uuid4().hex[:5]
        self.root = root
        self.procs: list[subprocess.Popen[bytes]] = []
        self.namespaces: list[str] = []
        self.root_links: list[str] = []
        self.mgmt: dict[str, str] = {}

    def ns(self, dev: str) -> str:
        return f"gf{self.tag}{dev}"

    def exec(self, dev: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run("ip", "netns", "exec", self.ns(dev), *cmd, check=check)

    def build(self) -> None:
        for dev in SWITCHES + HOSTS:
            _run("ip", "netns", "add", self.ns(dev))
            self.namespaces.append(self.ns(dev))
            self.exec(dev, "ip", "link", "set", "lo", "up")
        for n, ((a, a_if), (b, b_if)) in enumerate(WIRING):
            va, vb = f"gf{self.tag}a{n}", f"gf{self.tag}b{n}"  # <= 15 chars
            _run("ip", "link", "add", va, "type", "veth", "peer", "name", vb)
            for dev, tmp, name in ((a, va, a_if), (b, vb, b_if)):
                _run("ip", "link", "set", tmp, "netns", self.ns(dev))
                self.exec(dev, "ip", "link", "set", tmp, "name", name)
                self.exec(dev, "ip", "link", "set", name, "up")
        for n, dev in enumerate(SWITCHES, start=1):
            outer, inner = f"gf{self.tag}m{n}", f"gf{self.tag}n{n}"
            _run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
            self.root_links.append(outer)
            _run("ip", "link", "set", inner, "netns", self.ns(dev))
            self.exec(dev, "ip", "link", "set", inner, "name", "eth0")
            self.exec(dev, "ip", "addr", "add", f"10.199.{n}.2/30", "dev", "eth0")
            self.exec(dev, "ip", "link", "set", "eth0", "up")
            _run("ip", "addr", "add", f"10.199.{n}.1/30", "dev", outer)
            _run("ip", "link", "set", outer, "up")
            self.mgmt[dev] = f"10.199.{n}.2"

    def spawn(self, dev: str, *cmd: str, env: dict[str, str] | None = None) -> None:
        log = (self.root / f"{dev}-{Path(cmd[0]).name}.log").open("wb")
        self.procs.append(
            subprocess.Popen(
                ["ip", "netns", "exec", self.ns(dev), *cmd], stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})}, start_new_session=True,
            )
        )

    def start_daemons(self) -> None:
        for dev in SWITCHES + HOSTS:
            d = self.root / dev
            d.mkdir(mode=0o755)
            agentx = d / "agentx.sock"
            if dev in SWITCHES:
                conf = d / "snmpd.conf"
                conf.write_text(
                    f"rocommunity {dev} default\nmaster agentx\nagentXSocket unix:{agentx}\n"
                    f"sysName {dev}\nsysDescr Linux {dev} lab switch\n"
                )
                self.spawn(
                    dev, "snmpd", "-f", "-C", "-c", str(conf), "-Lf", str(d / "snmpd.trace"),
                    "-p", str(d / "snmpd.pid"), f"udp:{self.mgmt[dev]}:161",
                    env={"SNMP_PERSISTENT_DIR": str(d), "MIBS": ""},
                )
                # lldpd must find snmpd's AgentX socket at start, or it reconnects only after ~15 s
                _wait(lambda p=agentx: p.exists(), f"{dev}: snmpd AgentX socket")  # type: ignore[misc]
            (d / "lldpd.conf").write_text(
                f"configure system hostname {dev}\nconfigure lldp tx-interval 1\n"
                + ("configure lldp portidsubtype ifname\n" if dev in SWITCHES else "")
            )
            args = ["lldpd", "-d", "-u", str(d / "lldpd.ctl"), "-O", str(d / "lldpd.conf"), "-I", "swp*,eno*"]
            if dev in SWITCHES:
                args += ["-x", "-X", f"unix:{agentx}"]
            self.spawn(dev, *args)

    def neighbours(self, dev: str) -> int:
        out = self.exec(dev, "lldpcli", "-u", str(self.root / dev / "lldpd.ctl"), "-f", "keyvalue",
                        "show", "neighbors", check=False).stdout
        # keyvalue lines: lldp.<local ifname>.chassis.name=<peer>; one neighbour per port here
        return len({line.split(".")[1] for line in out.splitlines() if ".chassis.name=" in line})

    def mac_of(self, dev: str, ifname: str) -> str:
        return self.exec(dev, "cat", f"/sys/class/net/{ifname}/address").stdout.strip()

    def teardown(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with _suppress():
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                with _suppress():
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        for name in self.namespaces:
            _run("ip", "netns", "delete", name, check=False)
        for link in self.root_links:
            _run("ip", "link", "delete", link, check=False)


class _suppress:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return exc[0] is not None and issubclass(exc[0], ProcessLookupError | PermissionError)  # type: ignore[arg-type]


def _wait(ready: object, what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


@pytest.fixture
def lab() -> Iterator[Lab]:
    reason = _lab_available()
    if reason:
        raise RuntimeError(reason)  # never skipped: a CI box without the tools must fail loudly
    # lldpd runs lldpcli (to apply its config) as the unprivileged _lldpd user, which must reach
    # the control socket: pytest's tmp_path sits under a 0700 directory, so use a 0755 one.
    root = Path(tempfile.mkdtemp(prefix="gpufabric-lldp-lab-", dir="/tmp"))
    root.chmod(0o755)
    the_lab = Lab(root)
    try:
        the_lab.build()
        the_lab.start_daemons()
        yield the_lab
    finally:
        the_lab.teardown()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.integration
def test_collector_reproduces_the_lab_wiring(lab: Lab) -> None:
    expected_counts = {"s1": 2, "l1": 5, "l2": 5}
    for dev, count in expected_counts.items():
        _wait(lambda d=dev, c=count: lab.neighbours(d) >= c, f"{dev} to see {count} LLDP neighbours")  # type: ignore[misc]
    targets = [
        SnmpTarget(name=dev, address=lab.mgmt[dev], community=SecretStr(dev), timeout_s=2, retries=2,
                   platform="linux_lldpd")
        for dev in SWITCHES
    ]

    def walk_until_complete() -> dict[str, object]:
        results = {c.device: c for c in collect(targets, CollectorOptions(concurrency=3))}
        return results if all(len(results[d].neighbors) == n for d, n in expected_counts.items()) else {}

    results: dict = {}  # type: ignore[type-arg]
    deadline = time.monotonic() + WAIT_S
    while not results and time.monotonic() < deadline:  # lldpd registers rows with snmpd over AgentX
        results = walk_until_complete()
        if not results:
            time.sleep(0.5)
    assert results, "snmpd never exposed every lldpd neighbour"

    for dev, c in results.items():
        assert c.status is CollectionStatus.OK, (dev, c.detail)  # type: ignore[attr-defined]
    # The rows the SNMP asset lands, read back by the topology adapter, through the production
    # resolution: switches are keyed by the chassis MAC lldpd advertises, hosts by their name.
    obs = snmp_observations(results, lab.mgmt)  # type: ignore[arg-type]
    result = resolve_ethernet(obs.lldp, obs.systems, obs.interfaces, HOSTS, HostnameRules())
    assert result.unresolved == [] and result.findings == []
    name = {sid: sw.source for sid, sw in result.switches.items()}
    assert sorted(name.values()) == sorted(SWITCHES)
    assert all(normalise_mac(sid) == sid for sid in name)  # identity: each switch's chassis MAC
    links = derived_links(result)
    assert {frozenset((name.get(dev, dev), port) for dev, port in link) for link in links} == {
        frozenset(link) for link in WIRING
    }
    for link, entry in links.items():
        switches = {name[dev] for dev, _ in link if dev in name}
        assert entry["sources"] == {f"lldp:{s}" for s in switches}  # switch-switch: seen from both ends
        assert entry["both_sides"]
    host_ends = [r for entry in links.values() for end, r in entry["resolution"].items() if end.startswith("h")]
    assert len(host_ends) == 8 and {r["device_method"] for r in host_ends} == {"host_name"}
    every = [n for c in results.values() for n in c.neighbors]  # type: ignore[attr-defined]
    # real agent indexes, not the naive ones
    assert all(n.local_port_num == n.local_if_index for n in every)
    assert any(n.time_mark != 0 for n in every)
    assert any(n.rem_index != 1 for n in every)
    assert {n.remote_platform for n in every if n.port_id_subtype == 3} == {"linux_lldpd"}
    assert all(n.remote_port == "eno1" for n in every if n.port_id_subtype == 3)
