"""Vendor differences as data: for each netmiko device type (and NOS version), the command that
shows the LLDP neighbour table, how its output is parsed, and the field map into our schema.

``format`` picks the parser: ``json`` (the NOS's own structured output, walked with a
``_clean_<platform>`` function in :mod:`connectors.ssh.parsers` found by name), ``lldpctl`` (lldpd's
JSON, for NOSes that run lldpd), ``textfsm`` (ntc-templates or our own template in
``connectors/ssh/templates/``, always with ``raise_parsing_error=True`` so a template mismatch
is an error, not netmiko's silent fall-back to the raw string), ``xml`` (the NOS's XML reply,
walked with a ``_clean_<platform>_xml`` function). ``fields`` maps a TextFSM column (lower-cased,
as netmiko/ntc-templates return them) to one of our fields.

:data:`CLI_QUIRKS` holds how each NOS spells what it did not receive or how it escapes values
(NX-OS prints the string ``null`` for a missing port description, EOS wraps interface-name ids in
literal quotes, Junos JSON keeps XML entities); :data:`CAPTURE_FORMATS` names every format a saved
capture can be loaded in (``gpufabric ingest lldp --format``).
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
    format: Literal["json", "xml", "lldpctl", "textfsm"]
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
    # Detail and brief JSON share one layout; the summary ("show lldp neighbors | json") has its own
    # table (TABLE_nbor) and is read by the same cleaner, as is the NX-API envelope around either.
    ("cisco_nxos", "summary"): CommandSpec("cisco_nxos", "cisco_nxos", "show lldp neighbors | json", "json"),
    ("juniper_junos", None): CommandSpec(
        "juniper_junos", "juniper_junos", "show lldp neighbors | display json", "json"
    ),
    ("juniper_junos", "detail"): CommandSpec(
        "juniper_junos", "juniper_junos", "show lldp neighbors detail | display json", "json"
    ),
    # The <get-lldp-neighbors-information/> RPC (NETCONF / PyEZ) answers in XML with the JSON's names.
    ("juniper_junos", "xml"): CommandSpec("juniper_junos", "juniper_junos", "show lldp neighbors | display xml", "xml"),
    # IOS-XR's XML agent (<Get><Operational><LLDP>) and NETCONF (Cisco-IOS-XR-ethernet-lldp-oper)
    # carry the same detail records in CamelCase and kebab-case; one cleaner reads both.
    ("cisco_xr", "xml"): CommandSpec("cisco_xr", "cisco_xr", "show lldp neighbors detail | xml", "xml"),
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


@dataclass(frozen=True)
class CliQuirks:
    """How one NOS's structured output spells things (applied by :mod:`connectors.ssh.parsers`)."""

    absent: frozenset[str] = frozenset()
    """Values the NOS prints for a TLV it did not receive (compared case-insensitively)."""
    strip_quotes: bool = False
    """Interface-name ids arrive wrapped in literal double quotes (EOS: ``"\\"Ethernet1\\""``)."""
    xml_entities: bool = False
    """String values keep XML entities (``&lt;``) because the JSON was rendered from XML (Junos)."""
    summary_device_id_is_name: bool = False
    """The summary table's ``chassis_id`` holds the Device ID column: the system name, or the chassis
    id only when the neighbour sent no name (NX-OS ``show lldp neighbors``)."""


CLI_QUIRKS: dict[str, CliQuirks] = {
    "arista_eos": CliQuirks(strip_quotes=True),
    "cisco_nxos": CliQuirks(absent=frozenset({"null", "not advertised"}), summary_device_id_is_name=True),
    "juniper_junos": CliQuirks(absent=frozenset({"-"}), xml_entities=True),
    "cisco_xr": CliQuirks(absent=frozenset({"none"})),
}
NO_QUIRKS = CliQuirks()


CAPTURE_FORMATS: dict[str, tuple[str, str | None]] = {
    "eos-json": ("arista_eos", None),  # show lldp neighbors detail | json
    "nxos-json": ("cisco_nxos", None),  # show lldp neighbors [detail] | json, bare or in an NX-API envelope
    "junos-json": ("juniper_junos", None),  # show lldp neighbors [detail] | display json
    "junos-xml": ("juniper_junos", "xml"),  # show lldp neighbors [detail] | display xml / the RPC reply
    "iosxr-xml": ("cisco_xr", "xml"),  # XML agent or NETCONF reply of the LLDP oper data
    "cumulus-json": ("cumulus", None),  # lldpctl -f json / net show lldp json (json0 layout too)
    "lldpctl-json": ("linux", None),  # a host's lldpctl -f json
}
"""``gpufabric ingest lldp --format`` names of CLI captures -> the COMMANDS row that parses them
(the SNMP formats, snmprec and ``snmpwalk -On`` text, are read by :mod:`connectors.lldp_capture`)."""


def command_for(platform: str, version: str | None = None) -> CommandSpec:
    """The command spec for a platform (and version key); the platform default when the version
    has no row of its own. KeyError for a platform we have no row for."""
    return COMMANDS.get((platform, version)) or COMMANDS[(platform, None)]
