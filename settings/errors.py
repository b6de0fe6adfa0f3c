"""Limits on hostile input and the error types every settings problem ends as."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, get_args

# --------------------------------------------------------------------------------------------
# Limits. They exist so that hostile or accidental input (a YAML alias bomb, a binary file, a
# generated config gone wrong) fails fast with a message instead of eating the machine.
# --------------------------------------------------------------------------------------------

MAX_FILE_BYTES = 20 * 1024 * 1024
"""Larger files are refused before reading: a real site config is well under 1 MB."""

MAX_EXPANDED_NODES = 5_000_000
"""Values the document would contain with every alias expanded (5,000 switches is ~100,000)."""

MAX_DEPTH = 64
"""Nesting depth, counted through aliases. The schema itself is at most 6 levels deep."""

MAX_REPORTED_PROBLEMS = 100
"""``str(SettingsError)`` lists this many; ``SettingsError.problems`` keeps all of them."""

MAX_SECRET_BYTES = 64 * 1024
"""A secret file larger than this is almost certainly the wrong file (or ``/dev/zero``)."""

INLINE_SECRET_MESSAGE = "secret values must not be written inline; use {env: VAR} or {file: PATH}"

Platform = Literal[
    "arista_eos",
    "cisco_nxos",
    "cisco_ios",
    "cisco_xr",
    "juniper_junos",
    "mellanox_mlnxos",
    "sonic",
    "cumulus",
    "linux_lldpd",
]
KNOWN_PLATFORMS: tuple[str, ...] = get_args(Platform)
"""Platforms the connectors have command/template tables for (the keys of those tables)."""


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the configuration, kept structured so a CLI or UI can render it."""

    message: str
    source: str = ""
    line: int | None = None
    path: str = ""

    def __str__(self) -> str:
        if self.source and self.line is not None:
            where = f"{self.source}:{self.line}"
        elif self.line is not None:
            where = f"line {self.line}"
        else:
            where = self.source
        return ": ".join(_one_line(part) for part in (where, self.path, self.message) if part)


# Line breaks and other control characters (YAML's "\n", "\x85", "\u2028" in a quoted key or
# value end up in paths and messages): escaped, so that a problem stays one line of the report.
_CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _one_line(text: str) -> str:
    return _CONTROL_RE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class SettingsError(Exception):
    """The configuration cannot be used; ``str()`` is one human sentence per problem.

    It never carries the pydantic ``ValidationError`` as its cause: that object holds the raw
    input (which may contain a secret someone pasted) and would be printed by any traceback.
    """

    def __init__(self, problems: str | Problem | Iterable[Problem]) -> None:
        if isinstance(problems, str):
            problems = (Problem(problems),)
        elif isinstance(problems, Problem):
            problems = (problems,)
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__(self._render())

    def _render(self) -> str:
        lines = [str(problem) for problem in self.problems[:MAX_REPORTED_PROBLEMS]]
        hidden = len(self.problems) - MAX_REPORTED_PROBLEMS
        if hidden > 0:
            lines.append(f"... and {hidden} more problems (fix the ones above first)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self._render()


class SecretError(SettingsError):
    """A secret reference could not be resolved. Names the variable or file, never the content."""
