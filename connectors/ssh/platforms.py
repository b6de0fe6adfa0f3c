"""Vendor differences as data: for each netmiko device type (and NOS version), the command that
shows the LLDP neighbour table, how its output is parsed, and the field map into our schema.

``format`` picks the parser: ``json`` (the NOS's own structured output, walked with a
``_clean_<platform>`` function in :mod:`connectors.ssh.parsers` found by name), ``lldpctl`` (lldpd's
JSON, for NOSes that run lldpd), ``textfsm`` (ntc-templates or our own template in
``connectors/ssh/templates/``, always with ``raise_parsing_error=True`` so a template mismatch
is an error, not netmiko's silent fall-back to the raw string). ``fields`` maps a TextFSM
column (lower-cased, as netmiko/ntc-templates return them) to one of our fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

TEMPLATES = Path(__file__).parent / "templates"

OUR_FIELDS = (
    "local_port",
    "chassis_id",
    "chassis_id_type",
    "port_id",
    "port_id_type",
    "port_desc",
    "sys_name",
    "sys_desc",
    "man_addr",
    "rem_index",
    "parent_interface",
    "capabilities",
)
"""Every TextFSM column maps to one of these or is kept in ``extra`` (never lost)."""


@dataclass(frozen=True)
class CommandSpec:
    """How one platform (and version) shows its LLDP neighbours."""

    platform: str  # quirk-registry key (core.lldp.quirks)
    device_type: str  # netmiko device type
    command: str
    format: Literal["json", "lldpctl", "textfsm"]
    template: str | None = None  # our own template file (None: ntc-templates' index)
    fields: dict[str, str] = field(default_factory=dict)  # TextFSM column -> our field
    note: str = ""

    @property
    def template_path(self) -> str | None:
        return str(TEMPLATES / self.template) if self.template else None


_NTC_DETAIL = {
    "local_interface": "local_port",
    "chassis_id": "chassis_id",
    "neighbor_port_id": "port_id",
    "neighbor_interface": "port_id",
    "neighbor_name": "sys_name",
    "neighbor_description": "sys_desc",
    "mgmt_address": "man_addr",
    "capabilities": "capabilities",
}

COMMANDS: dict[tuple[str, str | None], CommandSpec] = {
    # --- structured output: preferred wherever the NOS has it -----------------------------------
    ("arista_eos", None): CommandSpec("arista_eos", "arista_eos", "show lldp neighbors detail | json", "json"),
    ("cisco_nxos", None): CommandSpec("cisco_nxos", "cisco_nxos", "show lldp neighbors detail | json", "json"),
    ("juniper_junos", None): CommandSpec(
        "juniper_junos", "juniper_junos", "show lldp neighbors | display json", "json"
    ),
    # Onyx: `show lldp remote` lacks the port description, which is where Junos peers put the port
    # name (they advertise their ifIndex as port id), so the detail command is collected.
    ("mellanox_mlnxos", None): CommandSpec(
        "mellanox_mlnxos",
        "mellanox_mlnxos",
        "show lldp interfaces ethernet remote",
        "textfsm",
        template="mellanox_mlnxos_show_lldp_interfaces_ethernet_remote.textfsm",
        fields={
            "local_interface": "local_port",
            "remote_index": "rem_index",
            "chassis_id": "chassis_id",
            "chassis_id_type": "chassis_id_type",
            "port_id": "port_id",
            "port_id_type": "port_id_type",
            "port_description": "port_desc",
            "system_name": "sys_name",
            "system_description": "sys_desc",
            "capabilities": "capabilities",
            "mgmt_address": "man_addr",
        },
    ),
    ("mellanox_mlnxos", "summary"): CommandSpec(
        "mellanox_mlnxos",
        "mellanox_mlnxos",
        "show lldp remote",
        "textfsm",
        template="mellanox_mlnxos_show_lldp_remote.textfsm",
        fields={
            "local_interface": "local_port",
            "chassis_id": "chassis_id",
            "port_id": "port_id",
            "system_name": "sys_name",
        },
    ),
    # SONiC and Cumulus run lldpd: its JSON carries chassis ids, which `show lldp table` (SONiC)
    # and `net show lldp` (Cumulus) do not -- without them a switch peer cannot be identified.
    ("sonic", None): CommandSpec("sonic", "linux", "docker exec lldp lldpctl -f json", "lldpctl"),
    ("sonic", "table"): CommandSpec(
        "sonic",
        "linux",
        "show lldp table",
        "textfsm",
        template="sonic_show_lldp_table.textfsm",
        fields={
            "local_port": "local_port",
            "remote_device": "sys_name",
            "remote_port_id": "port_id",
            "capability": "capabilities",
            "remote_port_descr": "port_desc",
        },
    ),
    ("cumulus", None): CommandSpec("cumulus", "cumulus_linux", "lldpctl -f json", "lldpctl"),
    ("cumulus", "net"): CommandSpec(
        "cumulus",
        "cumulus_linux",
        "net show lldp",
        "textfsm",
        template="cumulus_net_show_lldp.textfsm",
        fields={
            "local_port": "local_port",
            "remote_host": "sys_name",
            "remote_port": "port_id",
            "speed": "speed",
            "mode": "mode",
            "summary": "summary",
        },
    ),
    ("linux", None): CommandSpec("linux", "linux", "lldpctl -f json", "lldpctl"),
    # --- TextFSM via ntc-templates (no structured output used) ----------------------------------
    ("cisco_ios", None): CommandSpec(
        "cisco_ios",
        "cisco_ios",
        "show lldp neighbors detail",
        "textfsm",
        # ntc-templates cisco_ios: neighbor_interface is the *port description*, neighbor_port_id
        # the port id (the IOS "Port id:" / "Port Description:" lines).
        fields={**_NTC_DETAIL, "neighbor_interface": "port_desc", "mac_address": "mac_address"},
    ),
    ("cisco_xr", None): CommandSpec(
        "cisco_xr",
        "cisco_xr",
        "show lldp neighbors detail",
        "textfsm",
        fields={
            "local_interface": "local_port",
            "chassis_id": "chassis_id",
            "neighbor_port_id": "port_id",
            "neighbor_port_description": "port_desc",
            "neighbor": "sys_name",
            "system_description": "sys_desc",
            "management_ip": "man_addr",
            "management_ipv6": "man_addr",
            "capabilities": "capabilities",
        },
    ),
    ("arista_eos", "text"): CommandSpec(
        "arista_eos", "arista_eos", "show lldp neighbors detail", "textfsm", fields=dict(_NTC_DETAIL)
    ),
    ("cisco_nxos", "text"): CommandSpec(
        "cisco_nxos", "cisco_nxos", "show lldp neighbors detail", "textfsm", fields=dict(_NTC_DETAIL)
    ),
    ("juniper_junos", "text"): CommandSpec(
        "juniper_junos",
        "juniper_junos",
        "show lldp neighbors",
        "textfsm",
        fields={
            "local_interface": "local_port",
            "parent_interface": "parent_interface",
            "chassis_id": "chassis_id",
            "neighbor_interface": "port_id",
            "neighbor_name": "sys_name",
        },
    ),
}


def command_for(platform: str, version: str | None = None) -> CommandSpec:
    """The command spec for a platform (and version key); the platform default when the version
    has no row of its own. KeyError for a platform we have no row for."""
    return COMMANDS.get((platform, version)) or COMMANDS[(platform, None)]
