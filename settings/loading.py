"""Reading ``gpufabric.yaml`` safely and turning validation errors into file:line sentences."""

from __future__ import annotations

import difflib
import os
import re
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    ValidationError,
)

from settings.errors import (
    MAX_DEPTH,
    MAX_EXPANDED_NODES,
    MAX_FILE_BYTES,
    Problem,
    SettingsError,
)
from settings.models import (
    _UNIQUE,
    _UNIQUE_BY_LOC,
    SecretRef,
    Settings,
    _find_duplicates,
    _Unique,
)

# --------------------------------------------------------------------------------------------
# Reading YAML safely
# --------------------------------------------------------------------------------------------

_EventLoader: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE_TAG = "tag:yaml.org,2002:merge"
# YAML 1.1 printable set; anything else means binary or a broken encoding.
_NON_PRINTABLE_RE = re.compile("[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class _Fatal(Exception):
    """A problem that stops reading the file (syntax, encoding, size); carries one line number."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


@dataclass
class _Open:
    """A collection node being composed, with its alias-expanded size so far."""

    node: yaml.SequenceNode | yaml.MappingNode
    anchor: str | None
    path: str
    items: list[yaml.Node] = field(default_factory=list)
    size: int = 1
    height: int = 1


def _child_path(parent: _Open | None) -> str:
    if parent is None:
        return ""
    if isinstance(parent.node, yaml.SequenceNode):
        return f"{parent.path}[{len(parent.items)}]"
    key = parent.items[-1] if parent.items else None
    name = key.value if isinstance(key, yaml.ScalarNode) else "?"
    return f"{parent.path}.{name}" if parent.path else str(name)


def _compose(text: str) -> tuple[yaml.Node | None, list[Problem]]:
    """Compose one YAML document into nodes, refusing bombs, recursion and excessive depth.

    Equivalent to ``yaml.compose`` with the safe resolver, but iterative (no recursion limit to
    hit), and it tracks for every node how many nodes it stands for once aliases are expanded;
    anything walking the data later (the constructor's merge keys, pydantic) pays that size.
    Duplicate mapping keys, which PyYAML silently resolves to the last one, are reported.
    """
    resolver = yaml.resolver.Resolver()
    anchors: dict[str, yaml.Node] = {}
    stats: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded size, height)
    open_anchors: set[str] = set()
    stack: list[_Open] = []
    problems: list[Problem] = []
    root: yaml.Node | None = None
    documents = 0

    def attach(node: yaml.Node, line: int) -> None:
        nonlocal root
        size, height = stats[id(node)]
        if len(stack) + height > MAX_DEPTH:
            raise _Fatal(f"the document nests deeper than {MAX_DEPTH} levels (counting aliases)", line)
        if not stack:
            root = node
            return
        parent = stack[-1]
        parent.items.append(node)
        parent.size += size
        parent.height = max(parent.height, height + 1)
        if parent.size > MAX_EXPANDED_NODES:
            raise _Fatal(
                f"aliases expand the document to more than {MAX_EXPANDED_NODES:,} values "
                "(a YAML alias bomb?); write the values out or use switch_defaults",
                line,
            )

    def remember(anchor: str | None, node: yaml.Node) -> None:
        if anchor is not None:
            anchors[anchor] = node
            open_anchors.discard(anchor)

    for event in yaml.parse(text, Loader=_EventLoader):
        # libyaml's events carry its own Mark type; nodes accept any object with .line/.column.
        start: Any = event.start_mark
        end: Any = event.end_mark
        line = start.line + 1 if start is not None else None
        if isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                raise _Fatal("found a second YAML document ('---'); the file must hold exactly one", line)
        elif isinstance(event, yaml.AliasEvent):
            name = event.anchor
            if name in open_anchors:
                raise _Fatal(f"alias *{name} is used inside its own anchor (a recursive structure)", line)
            if name not in anchors:
                raise _Fatal(f"alias *{name} refers to an anchor that is not defined above it", line)
            attach(anchors[name], line or 0)
        elif isinstance(event, yaml.ScalarEvent):
            tag = event.tag
            if tag is None or tag == "!":
                tag = resolver.resolve(yaml.ScalarNode, event.value, event.implicit)
            scalar = yaml.ScalarNode(tag, event.value, start, end, style=event.style)
            stats[id(scalar)] = (1, 0)
            remember(event.anchor, scalar)
            attach(scalar, line or 0)
        elif isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent):
            if len(stack) >= MAX_DEPTH:
                raise _Fatal(f"the document nests deeper than {MAX_DEPTH} levels", line)
            is_seq = isinstance(event, yaml.SequenceStartEvent)
            kind: type[yaml.Node] = yaml.SequenceNode if is_seq else yaml.MappingNode
            tag = event.tag
            if tag is None or tag == "!":
                tag = resolver.resolve(kind, None, event.implicit)
            collection: yaml.SequenceNode | yaml.MappingNode
            if is_seq:
                collection = yaml.SequenceNode(tag, [], start, None, flow_style=event.flow_style)
            else:
                collection = yaml.MappingNode(tag, [], start, None, flow_style=event.flow_style)
            if event.anchor is not None:
                open_anchors.add(event.anchor)
            stack.append(_Open(collection, event.anchor, _child_path(stack[-1] if stack else None)))
        elif isinstance(event, yaml.SequenceEndEvent | yaml.MappingEndEvent):
            done = stack.pop()
            done.node.end_mark = end
            if isinstance(done.node, yaml.SequenceNode):
                done.node.value = done.items
            else:
                pairs = list(zip(done.items[0::2], done.items[1::2], strict=True))
                done.node.value = pairs
                problems.extend(_duplicate_keys(pairs, done.path))
            stats[id(done.node)] = (done.size, done.height)
            remember(done.anchor, done.node)
            attach(done.node, done.node.start_mark.line + 1)
    return root, problems


def _duplicate_keys(pairs: Sequence[tuple[yaml.Node, yaml.Node]], path: str) -> list[Problem]:
    seen: dict[tuple[str, str], int] = {}
    problems: list[Problem] = []
    for key, _value in pairs:
        if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE_TAG:
            continue
        line = key.start_mark.line + 1
        ident = (key.tag, key.value)
        if ident in seen:
            problems.append(
                Problem(
                    f"duplicate key '{key.value}' (first at line {seen[ident]}); only one may be given",
                    line=line,
                    path=path,
                )
            )
        else:
            seen[ident] = line
    return problems


class _Constructor(yaml.constructor.SafeConstructor):
    """SafeConstructor whose value errors (bad dates, 5,000-digit ints) name the offending node.

    PyYAML lets ``ValueError`` from e.g. ``date(2024, 13, 45)`` escape without a position.
    """

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, OverflowError, ArithmeticError) as exc:
            what = {
                "tag:yaml.org,2002:timestamp": "not a valid date or timestamp",
                "tag:yaml.org,2002:int": "not a usable integer",
                "tag:yaml.org,2002:float": "not a usable number",
                "tag:yaml.org,2002:binary": "not valid base64",
            }.get(node.tag, f"cannot be read ({type(exc).__name__})")
            raise yaml.constructor.ConstructorError(
                None, None, f"value is {what}; quote it if it is meant as text", node.start_mark
            ) from None


def _yaml_problem(exc: yaml.YAMLError) -> _Fatal:
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        reason = exc.problem or exc.context or "invalid YAML"
        if exc.context and exc.problem:
            reason = f"{exc.problem} ({exc.context})"
        if isinstance(exc, yaml.constructor.ConstructorError):
            return _Fatal(reason, mark.line + 1 if mark else None)
        return _Fatal(f"YAML syntax error: {reason}", mark.line + 1 if mark else None)
    first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return _Fatal(f"cannot read YAML: {first_line}")


def _decode(data: str | bytes) -> str:
    if isinstance(data, bytes):
        if len(data) > MAX_FILE_BYTES:
            raise _Fatal(_too_big(len(data)))
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
            raise _Fatal(
                f"the file is not UTF-8 text (byte 0x{data[exc.start]:02x} at column {column}); save it as UTF-8",
                line,
            ) from None
    else:
        text = data
        if len(text) > MAX_FILE_BYTES:
            raise _Fatal(_too_big(len(text)))
    text = text.removeprefix("\ufeff")
    bad = _NON_PRINTABLE_RE.search(text)
    if bad is not None:
        line = text.count("\n", 0, bad.start()) + 1
        column = bad.start() - (text.rfind("\n", 0, bad.start()) + 1) + 1
        raise _Fatal(
            f"the file contains the control character U+{ord(bad.group()):04X} at column {column}; "
            "is it a binary file?",
            line,
        )
    return text


def _too_big(size: int) -> str:
    return (
        f"the file is {size / 1024 / 1024:.1f} MB; the limit is {MAX_FILE_BYTES // 1024 // 1024} MB "
        "(is this the right file?)"
    )


# --------------------------------------------------------------------------------------------
# Turning pydantic errors into sentences
# --------------------------------------------------------------------------------------------

_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "decimal_type": "a number",
    "decimal_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
    "date_type": "a date (YYYY-MM-DD)",
    "date_parsing": "a date (YYYY-MM-DD)",
    "date_from_datetime_parsing": "a date (YYYY-MM-DD)",
    "date_from_datetime_inexact": "a date without a time of day",
    "path_type": "a path",
    "datetime_type": "a timestamp with a time zone (2027-03-31T23:59:59Z)",
    "datetime_parsing": "a timestamp with a time zone (2027-03-31T23:59:59Z)",
    "datetime_from_date_parsing": "a timestamp with a time zone (2027-03-31T23:59:59Z)",
    "timezone_aware": "a timestamp with a time zone (2027-03-31T23:59:59Z)",
}


def _describe_input(value: Any) -> str:
    """The kind of a value, never the value: it may be a secret in the wrong place."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string" if value else "an empty string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, datetime):
        return "a timestamp"
    if isinstance(value, date):
        return "a date"
    if isinstance(value, bytes):
        return "binary data"
    return "a value of the wrong kind"


def _unwrap(annotation: Any) -> Any:
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin is typing.Union or origin is types.UnionType:
            options = [arg for arg in get_args(annotation) if arg is not type(None)]
            if len(options) != 1:
                return annotation
            annotation = options[0]
        else:
            return annotation


def _type_at(loc: Sequence[str | int]) -> Any:
    """The declared type at a pydantic ``loc`` (used for key suggestions and nicer messages)."""
    current: Any = Settings
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            model_field = current.model_fields.get(part) if isinstance(part, str) else None
            if model_field is None:
                return None
            current = model_field.annotation
        elif get_origin(current) is list and isinstance(part, int):
            current = get_args(current)[0]
        elif get_origin(current) is dict:
            current = get_args(current)[1]
        else:
            return None
    return _unwrap(current)


def _format_path(loc: Sequence[str | int], data: Any) -> str:
    text = ""
    current = data
    for part in loc:
        if isinstance(part, int) and (isinstance(current, list) or current is None):
            text += f"[{part}]"
            current = current[part] if isinstance(current, list) and 0 <= part < len(current) else None
        elif part == "[key]":
            text += " (key)"
        else:
            text += f".{part}" if text else str(part)
            current = current.get(part) if isinstance(current, dict) else None
    return text


def _line_at(root: yaml.Node, loc: Sequence[str | int]) -> int:
    """Line of the deepest node ``loc`` reaches; a mapping entry is reported at its key's line.

    A missing field therefore points at its parent mapping, and a value inherited from an alias
    or ``<<`` merge points where it was written.
    """
    node = root
    line = root.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            found: tuple[yaml.Node, yaml.Node] | None = None
            for key, value in node.value:  # after merge flattening the last match wins, as in dicts
                if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                    found = (key, value)
            if found is None:
                break
            line = found[0].start_mark.line + 1
            node = found[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def _duplicate_message(rule: _Unique, items: Sequence[Any], first: int, root: yaml.Node | None) -> str:
    label = rule.key(items[first]) or "?"
    first_loc: tuple[str | int, ...] = (*rule.loc, first)
    first_path = _format_path(first_loc, None)
    where = f"{first_path}, line {_line_at(root, first_loc)}" if root is not None else first_path
    if rule.field is None:
        return f"duplicate {rule.what} ({label}); first given at {where}"
    return f"duplicate {rule.what} '{label}'; first used at {where}"


def _duplicate_problems(
    data: Any, root: yaml.Node | None, source: str, rule: _Unique, items: Sequence[Any]
) -> list[Problem]:
    problems = []
    for index, first in _find_duplicates(items, rule.key):
        loc: tuple[str | int, ...] = (*rule.loc, index)
        if rule.field is not None:
            loc = (*loc, rule.field)
        problems.append(
            Problem(
                _duplicate_message(rule, items, first, root),
                source=source,
                line=_line_at(root, loc) if root is not None else None,
                path=_format_path(loc, data),
            )
        )
    return problems


def _raw_duplicates(data: Any, root: yaml.Node, source: str) -> list[Problem]:
    """Duplicates found on the raw data, so they are listed even if the list has other errors."""
    problems: list[Problem] = []
    for rule in _UNIQUE:
        items: Any = data
        for part in rule.loc:
            items = items.get(part) if isinstance(items, dict) else None
        if isinstance(items, list):
            problems.extend(_duplicate_problems(data, root, source, rule, items))
    return problems


def _message(error: Mapping[str, Any], loc: tuple[str | int, ...]) -> str:
    kind = error["type"]
    ctx: Mapping[str, Any] = error.get("ctx") or {}
    value = error.get("input")
    if kind == "missing":
        if loc[:2] == ("sources", "switches") and len(loc) >= 4 and loc[3] in ("platform", "snmp", "ssh"):
            return "required field is missing (set it here or in sources.switch_defaults)"
        return "required field is missing"
    if kind == "literal_error":
        allowed = [str(option) for option in get_args(_type_at(loc))] or [ctx.get("expected", "")]
        if isinstance(value, str) and len(value) <= 64:
            message = f"'{value}' is not one of: {', '.join(allowed)}"
            close = difflib.get_close_matches(value, allowed, n=1, cutoff=0.6)
            return f"{message}; did you mean '{close[0]}'?" if close else message
        return f"expected one of: {', '.join(allowed)}; got {_describe_input(value)}"
    if kind in ("model_type", "model_attributes_type") and _type_at(loc) is SecretRef:
        return f"expected {{env: VAR}} or {{file: PATH}}; got {_describe_input(value)}"
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}; got {_describe_input(value)}"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        words = {
            "greater_than": ("greater than", "gt"),
            "greater_than_equal": ("at least", "ge"),
            "less_than": ("less than", "lt"),
            "less_than_equal": ("at most", "le"),
        }[kind]
        bound = ctx.get(words[1])
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        return f"must be {words[0]} {bound}"
    if kind in ("string_too_short", "too_short"):
        minimum = ctx.get("min_length", 1)
        if minimum == 1:
            return "must not be empty"
        return f"must have at least {minimum} {'characters' if kind == 'string_too_short' else 'entries'}"
    if kind in ("string_too_long", "too_long"):
        unit = "characters" if kind == "string_too_long" else "entries"
        return f"must have at most {ctx.get('max_length')} {unit}"
    if kind == "finite_number":
        return "must be a finite number"
    message = str(error.get("msg", "is not valid"))
    return message.removeprefix("Value error, ").removeprefix("Assertion failed, ")


def _translate(exc: ValidationError, data: Any, root: yaml.Node | None, source: str) -> list[Problem]:
    problems: list[Problem] = []
    errors = exc.errors(include_url=False)
    # Invalid switch_defaults are not merged (see Sources); the switches then lack what the
    # defaults would have given them. Those follow-on errors would only repeat the real one.
    defaults_broken = any(tuple(e["loc"][:2]) == ("sources", "switch_defaults") for e in errors)
    for error in errors:
        loc = tuple(error["loc"])
        if defaults_broken and _follows_from_broken_defaults(error["type"], loc):
            continue
        if error["type"] == "duplicate":
            rule = _UNIQUE_BY_LOC.get(tuple(str(part) for part in loc))
            items: Any = data
            for part in loc:
                items = items.get(part) if isinstance(items, dict) else None
            if rule is not None and isinstance(items, list):
                problems.extend(_duplicate_problems(data, root, source, rule, items))
                continue
        line = _line_at(root, loc) if root is not None else None
        if error["type"] == "invalid_key" and loc:
            problems.append(
                Problem(
                    f"key '{str(loc[-1])[:64]}' must be a string (YAML reads yes/no/on/off/null and "
                    "numbers as other types; quote the key)",
                    source=source,
                    line=line,
                    path=_format_path(loc[:-1], data),
                )
            )
            continue
        if error["type"] == "extra_forbidden" and loc:
            problems.append(Problem(_unknown_key(loc), source=source, line=line, path=_format_path(loc[:-1], data)))
            continue
        problems.append(Problem(_message(error, loc), source=source, line=line, path=_format_path(loc, data)))
    return problems


def _follows_from_broken_defaults(kind: str, loc: tuple[str | int, ...]) -> bool:
    """Errors a switch can have only because the defaults it relies on were not merged.

    Reported again once switch_defaults is fixed, if they were real.
    """
    if loc[:2] != ("sources", "switches") or len(loc) < 3:
        return False
    if kind == "switch":
        return len(loc) == 3
    if kind == "snmp":
        return loc[3:] == ("snmp",)
    return kind == "missing" and len(loc) >= 4 and loc[3] in ("platform", "snmp", "ssh")


def _unknown_key(loc: tuple[str | int, ...]) -> str:
    key = str(loc[-1])
    parent = _type_at(loc[:-1])
    valid = list(parent.model_fields) if isinstance(parent, type) and issubclass(parent, BaseModel) else []
    message = f"unknown key '{key[:64]}'"
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    if close:
        return f"{message}; did you mean '{close[0]}'?"
    if valid:
        return f"{message}; valid keys here: {', '.join(valid)}"
    return message


# --------------------------------------------------------------------------------------------
# Entry points
# --------------------------------------------------------------------------------------------


ENV_CONFIG = "GPUFABRIC_CONFIG"


def default_settings_path() -> Path:
    """``GPUFABRIC_CONFIG``; else ``./gpufabric.yaml``; else the simulated site of the last
    ``gpufabric sim up`` (so ``make ui`` after ``make demo`` shows the demo's sources). Free of
    Dagster: the controllers use it too."""
    if os.environ.get(ENV_CONFIG):
        return Path(os.environ[ENV_CONFIG])
    from connectors.warehouse import data_dir

    local = Path("gpufabric.yaml")
    simulated = data_dir() / "sim" / "gpufabric.yaml"
    return simulated if not local.exists() and simulated.exists() else local


def load_settings(path: str | Path) -> Settings:
    """Read and validate ``gpufabric.yaml``; relative paths inside it resolve against its folder.

    Raises ``SettingsError`` listing every problem with file, line and field path.
    """
    source = str(path)
    file_path = Path(path)
    try:
        info = file_path.stat()
    except FileNotFoundError:
        raise SettingsError(Problem("file not found", source=source)) from None
    except OSError as exc:
        raise SettingsError(Problem(f"cannot read the file ({exc.strerror})", source=source)) from None
    if file_path.is_dir():
        raise SettingsError(Problem("is a directory; expected a YAML file", source=source))
    if info.st_size > MAX_FILE_BYTES:
        raise SettingsError(Problem(_too_big(info.st_size), source=source))
    try:
        with file_path.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)  # bounded even for /dev/zero-like files
    except OSError as exc:
        raise SettingsError(Problem(f"cannot read the file ({exc.strerror})", source=source)) from None
    # absolute(), not resolve(): a ConfigMap mount is a symlink into a directory that rotates.
    absolute = file_path.absolute()
    return _parse(raw, source, absolute.parent, absolute)


def parse_settings(text: str | bytes, source: str = "<string>", *, base_dir: str | Path | None = None) -> Settings:
    """Validate configuration text; ``source`` names it in messages.

    Relative paths resolve against ``base_dir`` (default: the current directory).
    """
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    return _parse(text, source, base.absolute(), None)


def _parse(data: str | bytes, source: str, base_dir: Path, source_path: Path | None) -> Settings:
    try:
        text = _decode(data)
        root, problems = _compose(text)
    except _Fatal as fatal:
        raise SettingsError(Problem(fatal.message, source=source, line=fatal.line)) from None
    except yaml.YAMLError as exc:
        bad_yaml = _yaml_problem(exc)
        raise SettingsError(Problem(bad_yaml.message, source=source, line=bad_yaml.line)) from None
    except RecursionError:  # defence in depth: _compose is iterative and depth-limited
        raise SettingsError(Problem("the document nests too deeply", source=source)) from None
    problems = [Problem(p.message, source=source, line=p.line, path=p.path) for p in problems]

    if root is None or (isinstance(root, yaml.ScalarNode) and root.tag == "tag:yaml.org,2002:null"):
        raise SettingsError(Problem("the file is empty; it needs at least 'version: 1'", source=source, line=1))
    if not isinstance(root, yaml.MappingNode):
        kind = "a list" if isinstance(root, yaml.SequenceNode) else "a single value"
        raise SettingsError(
            Problem(
                f"the top level must be a mapping of settings (version, sources, tenants, ...), not {kind}",
                source=source,
                line=root.start_mark.line + 1,
            )
        )
    try:
        document = _Constructor().construct_document(root)
    except yaml.YAMLError as exc:
        bad_value = _yaml_problem(exc)
        raise SettingsError([*problems, Problem(bad_value.message, source=source, line=bad_value.line)]) from None
    except RecursionError:
        raise SettingsError(Problem("the document nests too deeply", source=source)) from None

    problems.extend(_raw_duplicates(document, root, source))
    settings: Settings | None = None
    try:
        settings = Settings.model_validate(document, context={"base_dir": base_dir})
    except ValidationError as exc:
        problems.extend(_translate(exc, document, root, source))
    if problems or settings is None:
        unique = list(dict.fromkeys(problems))
        unique.sort(key=lambda problem: problem.line or 0)
        raise SettingsError(unique)
    settings._source_path = source_path
    return settings
