"""Collect LLDP neighbour tables over SSH with netmiko: bounded concurrency (a thread pool, since
netmiko is blocking), per-device connect/auth/read timeouts, password or key by reference.

Each device yields a :class:`CliCollection` as soon as it is done (``as_completed``), so the asset
lands switch by switch and a hanging switch delays nobody but itself. Failures map to
``ops.collection_status``: authentication -> auth_failure, connect/read timeouts -> timeout,
refused/unreachable -> unreachable, anything else -> error (the message never carries a secret).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from connectors.ssh.parsers import SOURCE, CliParse, parse_output
from connectors.ssh.platforms import CommandSpec, command_for
from core.lldp import Interface, LldpNeighbor, LldpSystem
from core.quality import CollectionStatus, Quarantined

# paramiko logs a session a switch resets at ERROR on its own logger, and with no handler
# configured Python's last-resort handler prints it bare on stderr ("Socket exception: Connection
# reset by peer (104)"). That session's failure is already this collector's status row, so the
# line is noise; a handler here stops the last resort while a logging config the user sets still
# sees the record (it propagates as before).
logging.getLogger("paramiko.transport").addHandler(logging.NullHandler())


@dataclass(frozen=True)
class SshTarget:
    name: str
    address: str
    platform: str
    username: str
    port: int = 22
    password: str | None = field(default=None, repr=False)
    key_file: str | None = None
    device_type: str | None = None  # netmiko device type when it differs from the platform's
    version: str | None = None  # COMMANDS version key
    timeout_s: float = 20.0  # connect, auth and the LLDP command's read timeout, each


@dataclass
class CliCollection:
    """One device's collection: what lands in raw.lldp_neighbor_observations and ops.*.
    Field names match the SNMP collector's ``LldpCollection`` so shared tooling reads both."""

    device: str
    platform: str
    command: str
    neighbors: list[LldpNeighbor]
    quarantined: list[Quarantined]
    status: CollectionStatus
    detail: str | None = None
    elapsed_s: float = 0.0
    output_bytes: int = 0
    system: LldpSystem | None = None  # CLI collection does not read the local system group
    interfaces: list[Interface] = field(default_factory=list)


@dataclass
class SshOptions:
    concurrency: int = 32


def status_of(parsed: CliParse) -> CollectionStatus:
    if parsed.neighbors and parsed.quarantined:
        return CollectionStatus.PARTIAL
    if parsed.neighbors:
        return CollectionStatus.OK
    return CollectionStatus.INVALID if parsed.quarantined else CollectionStatus.NO_DATA


def _classify(err: BaseException) -> tuple[CollectionStatus, str]:
    from netmiko.exceptions import NetmikoAuthenticationException, NetmikoTimeoutException, ReadTimeout

    text = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    if isinstance(err, NetmikoAuthenticationException):
        return CollectionStatus.AUTH_FAILURE, "authentication failed"
    if isinstance(err, ReadTimeout):
        return CollectionStatus.TIMEOUT, "no complete answer to the LLDP command within the read timeout"
    if isinstance(err, NetmikoTimeoutException | TimeoutError):
        return CollectionStatus.TIMEOUT, "connection timed out"
    if isinstance(err, ConnectionRefusedError | OSError) and not isinstance(err, TimeoutError):
        return CollectionStatus.UNREACHABLE, text
    return CollectionStatus.ERROR, text


def collect_one(target: SshTarget) -> CliCollection:
    """Connect, run the platform's LLDP command, parse. Never raises."""
    from netmiko import ConnectHandler

    started = time.monotonic()
    try:
        spec: CommandSpec = command_for(target.platform, target.version)
    except KeyError:
        return CliCollection(
            target.name,
            target.platform,
            "",
            [],
            [],
            CollectionStatus.ERROR,
            f"no LLDP command known for platform {target.platform!r}",
        )
    params: dict[str, Any] = {
        "device_type": target.device_type or spec.device_type,
        "host": target.address,
        "port": target.port,
        "username": target.username,
        "conn_timeout": target.timeout_s,
        "auth_timeout": target.timeout_s,
        "banner_timeout": target.timeout_s,
        "read_timeout_override": None,
        "fast_cli": True,
        "session_timeout": target.timeout_s,
    }
    if target.password is not None:
        params["password"] = target.password
        params["use_keys"] = False
        params["allow_agent"] = False
    if target.key_file is not None:
        params["key_file"] = target.key_file
        params["use_keys"] = True
    params = {k: v for k, v in params.items() if v is not None}
    try:
        conn = ConnectHandler(**params)
        try:
            output = conn.send_command(
                spec.command, read_timeout=target.timeout_s, strip_prompt=True, strip_command=True
            )
        except BaseException:
            # A session that did not answer will not answer netmiko's polite `exit` either (that
            # waits out another timeout): drop the transport instead.
            conn.paramiko_cleanup()
            raise
        conn.disconnect()
    except Exception as err:  # netmiko/paramiko raise many types; every one is a status, not a crash
        status, detail = _classify(err)
        if target.password:
            detail = detail.replace(target.password, "***")
        return CliCollection(
            target.name, spec.platform, spec.command, [], [], status, detail, time.monotonic() - started
        )
    text = output if isinstance(output, str) else str(output)
    parsed = parse_output(text, spec, target.name)
    status = status_of(parsed)
    reason = parsed.quarantined[0].reason if status is CollectionStatus.INVALID else None
    return CliCollection(
        target.name,
        spec.platform,
        spec.command,
        parsed.neighbors,
        parsed.quarantined,
        status,
        reason,
        time.monotonic() - started,
        len(text.encode()),
    )


def collect(
    targets: Iterable[SshTarget],
    options: SshOptions | None = None,
    progress: Callable[[CliCollection], None] | None = None,
) -> Iterator[CliCollection]:
    """Collect every target, at most ``options.concurrency`` at a time; yields as each finishes."""
    options = options or SshOptions()
    targets = list(targets)
    if not targets:
        return
    with ThreadPoolExecutor(
        max_workers=max(1, min(options.concurrency, len(targets))), thread_name_prefix="ssh-lldp"
    ) as pool:
        futures = [pool.submit(collect_one, t) for t in targets]
        for future in as_completed(futures):
            c = future.result()
            if progress is not None:
                progress(c)
            yield c


__all__ = ["SOURCE", "CliCollection", "SshOptions", "SshTarget", "collect", "collect_one", "status_of"]
