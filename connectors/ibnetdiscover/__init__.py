"""ibnetdiscover: parser for its output and a runner for the real command."""

from connectors.ibnetdiscover.parser import (
    SOURCE,
    IbFabric,
    IbLink,
    IbnetdiscoverError,
    IbNode,
    IbPort,
    iter_records,
    parse_file,
    parse_ibnetdiscover,
    read_lines,
)
from connectors.ibnetdiscover.runner import IbnetdiscoverTimeout, discover

__all__ = [
    "SOURCE",
    "IbFabric",
    "IbLink",
    "IbNode",
    "IbPort",
    "IbnetdiscoverError",
    "IbnetdiscoverTimeout",
    "discover",
    "iter_records",
    "parse_file",
    "parse_ibnetdiscover",
    "read_lines",
]
