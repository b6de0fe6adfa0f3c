"""LLDP over SSH CLI (netmiko): per-platform commands and parsers as data, structured output first,
TextFSM (ntc-templates or ours) with raise_parsing_error=True otherwise."""

from connectors.ssh.collector import CliCollection, SshOptions, SshTarget, collect, collect_one, status_of
from connectors.ssh.parsers import SOURCE, CliParse, CliRow, parse_output
from connectors.ssh.platforms import COMMANDS, CommandSpec, command_for

__all__ = [
    "COMMANDS",
    "SOURCE",
    "CliCollection",
    "CliParse",
    "CliRow",
    "CommandSpec",
    "SshOptions",
    "SshTarget",
    "collect",
    "collect_one",
    "command_for",
    "parse_output",
    "status_of",
]
