"""The site configuration file, ``gpufabric.yaml``, read into validated pydantic models.

Why this module is more than ``Settings.model_validate(yaml.safe_load(...))``:

* Operators edit this file by hand, so every problem must come back as one plain sentence that
  names the file, the line and the field (``gpufabric.yaml:14: sources.switches[2].snmp.community:
  ...``), all problems at once, never a traceback or a pydantic URL. Pydantic reports a ``loc``
  tuple; we map it back to a line through the composed YAML node graph.
* The file names the real switches and fabric managers, so it is the obvious place for someone to
  paste a password. Secrets are only ever *references* (``{env: VAR}`` / ``{file: PATH}``); an
  inline value is refused, and neither the refusal nor anything else here echoes it.
* The file may come from anywhere (a ConfigMap, a GitOps repo, a typo'd path pointing at a
  binary). Alias bombs, recursive anchors, deep nesting, non-UTF-8 and binary input all end in a
  ``SettingsError`` within bounded time and memory: we compose the YAML ourselves from the
  (C-accelerated) event stream and count what aliases would expand to before anything walks it.
* A thousand switches should not repeat their credentials: ``sources.switch_defaults`` is merged
  into every switch before validation, and ``sources.collection`` supplies SNMP timeouts.

Nothing here resolves secrets or touches the network at load time: a config can be validated on a
laptop that has none of the production environment variables. ``SecretRef.resolve()`` is called
by the connector that needs the value, at the moment it needs it.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
import types
import typing
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin
from urllib.parse import urlsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

__all__ = [
    "INLINE_SECRET_MESSAGE",
    "KNOWN_PLATFORMS",
    "MAX_FILE_BYTES",
    "CollectionSettings",
    "DcgmExporterSource",
    "DcimSource",
    "FabricManagerSource",
    "KubernetesSource",
    "Platform",
    "Problem",
    "PrometheusSource",
    "PublishSettings",
    "RateCard",
    "SecretError",
    "SecretRef",
    "Settings",
    "SettingsError",
    "SnmpConfig",
    "SnmpDefaults",
    "Sources",
    "SshConfig",
    "SshDefaults",
    "Switch",
    "SwitchDefaults",
    "Tenant",
    "WarehouseSettings",
    "load_settings",
    "parse_settings",
]

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
        return ": ".join(part for part in (where, self.path, self.message) if part)


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


# --------------------------------------------------------------------------------------------
# Field types and validators
# --------------------------------------------------------------------------------------------

_LABEL_VALUE_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HOSTNAME_RE = re.compile(r"[A-Za-z0-9_]([-A-Za-z0-9_]{0,62})(\.[A-Za-z0-9_]([-A-Za-z0-9_]{0,62}))*\.?")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def _check_name(value: str) -> str:
    """Names identify sources in ``raw.*`` rows and logs, so they must be printable and trimmed."""
    if not value or value != value.strip() or _CONTROL_RE.search(value):
        raise PydanticCustomError("name", "must be a non-empty name without surrounding spaces")
    return value


def _check_label_value(value: str) -> str:
    """Tenant ids and tiers end up as Kubernetes label values; refuse what the API server would."""
    if len(value) > 63 or not _LABEL_VALUE_RE.fullmatch(value):
        raise PydanticCustomError(
            "label_value",
            "'{value}' is not a valid Kubernetes label value (at most 63 characters: letters, digits, "
            "'-', '_' or '.', starting and ending with a letter or digit)",
            {"value": value[:80]},
        )
    return value


def _check_dns_subdomain(value: str) -> str:
    """Label prefixes and Kueue cohort names must be lowercase DNS subdomains."""
    if len(value) > 253 or not _DNS_SUBDOMAIN_RE.fullmatch(value):
        raise PydanticCustomError(
            "dns_subdomain",
            "'{value}' is not a valid DNS subdomain (lowercase letters, digits, '-' and '.', "
            "at most 253 characters)",
            {"value": value[:80]},
        )
    return value


def _check_env_name(value: str) -> str:
    # The value is not echoed: a confused user may have typed the secret itself here.
    if not _ENV_NAME_RE.fullmatch(value):
        raise PydanticCustomError(
            "env_name",
            "not a valid environment variable name (letters, digits and '_', not starting with a digit)",
        )
    return value


def _check_address(value: str) -> str:
    """A switch management address: an IP or a hostname, without port (ports live in snmp/ssh)."""
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    if len(value) > 253 or not _HOSTNAME_RE.fullmatch(value):
        raise PydanticCustomError(
            "address", "must be a hostname or an IP address (put ports under snmp/ssh, not here)"
        )
    return value


def _check_http_url(value: str) -> str:
    """HTTP endpoints. Credentials in the URL are refused: they would be secrets written inline."""
    try:
        parts = urlsplit(value)
        has_password = parts.password is not None
        hostname = parts.hostname
    except ValueError:
        raise PydanticCustomError("url", "must be an http:// or https:// URL") from None
    if has_password:
        raise PydanticCustomError(
            "inline_secret",
            "credentials must not be written into the URL; use username plus password: {env: VAR} "
            "or {file: PATH}",
        )
    if parts.scheme not in ("http", "https") or not hostname:
        raise PydanticCustomError("url", "must be an http:// or https:// URL")
    return value


def _check_path_text(value: Any) -> Any:
    """``Path('')`` is ``.``, which is never what an empty value meant."""
    if isinstance(value, str) and not value.strip():
        raise PydanticCustomError("path", "must be a non-empty path")
    return value


def _resolve_path(value: Path, info: ValidationInfo) -> Path:
    """Relative paths are relative to the config file's folder, not to wherever the CLI ran."""
    value = value.expanduser()
    context = info.context if isinstance(info.context, Mapping) else {}
    base = context.get("base_dir")
    if not value.is_absolute() and base is not None:
        value = Path(base) / value
    return value


Name = Annotated[str, AfterValidator(_check_name), Field(max_length=253)]
LabelValue = Annotated[str, AfterValidator(_check_label_value)]
DnsSubdomain = Annotated[str, AfterValidator(_check_dns_subdomain)]
HttpUrl = Annotated[str, AfterValidator(_check_http_url)]
ConfigPath = Annotated[Path, BeforeValidator(_check_path_text), AfterValidator(_resolve_path)]
Port = Annotated[int, Field(ge=1, le=65535)]
TimeoutS = Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)]
Retries = Annotated[int, Field(ge=0, le=10)]
NonEmptyStr = Annotated[str, Field(min_length=1)]


class _Model(BaseModel):
    """Base for every config model: unknown keys are errors, values are immutable once loaded.

    ``coerce_numbers_to_str`` because YAML reads ``id: 42`` or ``gpu_model: 4090`` as numbers and
    that is never a mistake worth an error. ``hide_input_in_errors`` keeps raw values (possibly a
    pasted secret) out of pydantic's own messages in case one ever escapes.
    """

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        coerce_numbers_to_str=True,
        hide_input_in_errors=True,
    )


# --------------------------------------------------------------------------------------------
# Secrets
# --------------------------------------------------------------------------------------------


class SecretRef(_Model):
    """Where a secret lives: ``{env: NAME}`` or ``{file: PATH}``, never the value itself.

    Resolution is lazy (``resolve()``) so validating a config never needs the secrets, and a
    rotated file or variable is picked up by the next connector that asks.
    """

    env: Annotated[str, AfterValidator(_check_env_name)] | None = None
    file: ConfigPath | None = None

    @model_validator(mode="before")
    @classmethod
    def _refuse_inline(cls, data: Any) -> Any:
        # Any scalar here is a secret someone pasted; the message must not repeat it.
        if isinstance(data, str | bytes | int | float | date):
            raise PydanticCustomError("inline_secret", INLINE_SECRET_MESSAGE)
        return data

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise PydanticCustomError(
                "secret_ref", "a secret reference needs exactly one of {env: VAR} or {file: PATH}"
            )
        return self

    def describe(self) -> str:
        """Where the secret comes from, safe for logs and errors."""
        if self.env is not None:
            return f"environment variable {self.env}"
        return f"file {self.file}"

    def resolve(self) -> SecretStr:
        """Read the secret now. Trailing newlines (``echo x > file``) are stripped.

        Raises ``SecretError`` naming the variable or file when it is missing, empty or unreadable.
        """
        if self.env is not None:
            value = os.environ.get(self.env)
            if value is None:
                raise SecretError(f"secret environment variable {self.env} is not set")
            value = value.rstrip("\r\n")
            if not value:
                raise SecretError(f"secret environment variable {self.env} is empty")
            return SecretStr(value)
        assert self.file is not None  # guaranteed by _exactly_one
        path = self.file
        try:
            with path.open("rb") as handle:
                raw = handle.read(MAX_SECRET_BYTES + 1)
        except FileNotFoundError:
            raise SecretError(f"secret file {path} does not exist") from None
        except IsADirectoryError:
            raise SecretError(f"secret file {path} is a directory") from None
        except PermissionError:
            raise SecretError(f"secret file {path} cannot be read (permission denied)") from None
        except OSError as exc:
            raise SecretError(f"secret file {path} cannot be read ({exc.strerror or 'I/O error'})") from None
        if len(raw) > MAX_SECRET_BYTES:
            raise SecretError(
                f"secret file {path} is larger than {MAX_SECRET_BYTES // 1024} KiB; is it the right file?"
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise SecretError(f"secret file {path} is not UTF-8 text") from None
        text = text.rstrip("\r\n")
        if not text:
            raise SecretError(f"secret file {path} is empty")
        return SecretStr(text)


# --------------------------------------------------------------------------------------------
# Sources
# --------------------------------------------------------------------------------------------


class DcimSource(_Model):
    """An inventory export (racks, hosts, cabling plan). ``format`` defaults from the file suffix."""

    name: Name
    path: ConfigPath
    format: Literal["csv", "yaml"]

    @model_validator(mode="before")
    @classmethod
    def _format_from_suffix(cls, data: Any) -> Any:
        if isinstance(data, dict) and "format" not in data and isinstance(data.get("path"), str):
            suffix = Path(data["path"]).suffix.lower()
            guessed = {".csv": "csv", ".yaml": "yaml", ".yml": "yaml"}.get(suffix)
            if guessed is not None:
                return {**data, "format": guessed}
        return data


class CollectionSettings(_Model):
    """How hard to hit the switches: fan-out, and the default timeout/retries for SNMP and SSH."""

    concurrency: Annotated[int, Field(ge=1, le=4096)] = 64
    timeout_s: TimeoutS = 10.0
    retries: Retries = 2


def _normalise_snmp_version(value: Any) -> Any:
    """YAML reads ``version: 3`` as an int and people write ``v2c``; all mean the same thing."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float | str):
        text = str(value).strip().lower().removeprefix("v")
        # unknown spellings pass through as text, so the error quotes what the user wrote
        return {"2": "2c", "2c": "2c", "3": "3", "3.0": "3"}.get(text, str(value))
    return value


SnmpVersion = Annotated[Literal["2c", "3"], BeforeValidator(_normalise_snmp_version)]
AuthProtocol = Literal["SHA", "SHA256", "SHA512"]
PrivProtocol = Literal["AES", "AES192", "AES256"]

_SNMP_V3_FIELDS = ("user", "auth_protocol", "auth_key", "priv_protocol", "priv_key", "context")
_SNMP_TRANSPORT_FIELDS = ("port", "timeout_s", "retries")


class SnmpConfig(_Model):
    """SNMP access to one switch (LLDP-MIB walk). v2c needs a community; v3 a user and keys."""

    version: SnmpVersion
    port: Port = 161
    community: SecretRef | None = None
    user: NonEmptyStr | None = None
    auth_protocol: AuthProtocol | None = None
    auth_key: SecretRef | None = None
    priv_protocol: PrivProtocol | None = None
    priv_key: SecretRef | None = None
    context: NonEmptyStr | None = None
    """SNMPv3 contextName (agents that serve several MIB instances, e.g. one per VRF or, in the
    snmpsim twin, one per simulated switch)."""
    timeout_s: TimeoutS = 10.0
    retries: Retries = 2

    @model_validator(mode="after")
    def _credentials_match_version(self) -> SnmpConfig:
        issues: list[str] = []
        if self.version == "2c":
            if self.community is None:
                issues.append("SNMP v2c needs community: {env: VAR} or {file: PATH}")
            stray = [name for name in _SNMP_V3_FIELDS if getattr(self, name) is not None]
            if stray:
                issues.append(f'{", ".join(stray)} only apply to SNMP version "3"')
        else:
            if self.community is not None:
                issues.append("community only applies to SNMP v2c; SNMPv3 uses user, auth_key, priv_key")
            if self.user is None:
                issues.append("SNMPv3 needs user")
            if (self.auth_key is None) != (self.auth_protocol is None):
                issues.append("auth_key and auth_protocol (SHA, SHA256 or SHA512) go together")
            if (self.priv_key is None) != (self.priv_protocol is None):
                issues.append("priv_key and priv_protocol (AES, AES192 or AES256) go together")
            if self.priv_key is not None and self.auth_key is None:
                issues.append("SNMPv3 authPriv needs both auth_key and priv_key (auth_key is missing)")
        if issues:
            raise PydanticCustomError("snmp", "{issues}", {"issues": "; ".join(issues)})
        return self

    @property
    def security_level(self) -> Literal["noAuthNoPriv", "authNoPriv", "authPriv"] | None:
        """The SNMPv3 security level implied by the keys present (``None`` for v2c)."""
        if self.version == "2c":
            return None
        if self.priv_key is not None:
            return "authPriv"
        return "authNoPriv" if self.auth_key is not None else "noAuthNoPriv"


class SshConfig(_Model):
    """SSH access (netmiko + TextFSM). No password means key file or ssh-agent authentication."""

    port: Port = 22
    username: NonEmptyStr
    password: SecretRef | None = None
    key_file: ConfigPath | None = None
    device_type: NonEmptyStr | None = None
    """netmiko device type when it differs from the platform's default."""


class SnmpDefaults(_Model):
    """``SnmpConfig`` with everything optional: the shared part of many switches' SNMP settings."""

    version: SnmpVersion | None = None
    port: Port | None = None
    community: SecretRef | None = None
    user: NonEmptyStr | None = None
    auth_protocol: AuthProtocol | None = None
    auth_key: SecretRef | None = None
    priv_protocol: PrivProtocol | None = None
    priv_key: SecretRef | None = None
    context: NonEmptyStr | None = None
    timeout_s: TimeoutS | None = None
    retries: Retries | None = None


class SshDefaults(_Model):
    """``SshConfig`` with everything optional."""

    port: Port | None = None
    username: NonEmptyStr | None = None
    password: SecretRef | None = None
    key_file: ConfigPath | None = None
    device_type: NonEmptyStr | None = None


class SwitchDefaults(_Model):
    """Merged into every entry of ``sources.switches``; the switch's own keys win.

    ``snmp`` and ``ssh`` merge key by key. When a switch sets a different SNMP ``version`` than
    the defaults, only port/timeout_s/retries are inherited (v2c and v3 credentials don't mix).
    A switch can opt out of an inherited protocol with ``snmp: null`` / ``ssh: null``.
    """

    platform: Platform | None = None
    snmp: SnmpDefaults | None = None
    ssh: SshDefaults | None = None


class Switch(_Model):
    """One Ethernet switch whose LLDP neighbours we collect, by SNMP, SSH or both."""

    name: Name
    address: Annotated[str, AfterValidator(_check_address)]
    platform: Platform
    snmp: SnmpConfig | None = None
    ssh: SshConfig | None = None

    @model_validator(mode="after")
    def _has_a_protocol(self) -> Switch:
        if self.snmp is None and self.ssh is None:
            raise PydanticCustomError(
                "switch", "needs snmp or ssh settings (here or in sources.switch_defaults)"
            )
        return self


class FabricManagerSource(_Model):
    """An InfiniBand fabric source: NVIDIA UFM over REST, or the local ``ibnetdiscover`` command."""

    name: Name
    kind: Literal["ufm", "ibnetdiscover"]
    url: HttpUrl | None = None
    auth: Literal["basic", "token"] | None = None
    username: NonEmptyStr | None = None
    password: SecretRef | None = None
    token: SecretRef | None = None
    verify_tls: bool = True
    ca_file: ConfigPath | None = None
    timeout_s: TimeoutS = 30.0
    retries: Retries = 3
    # kind ibnetdiscover: a saved output to load instead of running the command on this host.
    path: ConfigPath | None = None
    # Extra host-name regexes per class (exclude, ufm, storage, management), on top of the
    # built-in rules of core/infiniband.py: those HCAs become findings, not compute hosts.
    host_classes: dict[Literal["exclude", "ufm", "storage", "management"], list[NonEmptyStr]] = Field(
        default_factory=dict
    )

    @model_validator(mode="after")
    def _auth_is_complete(self) -> FabricManagerSource:
        issues: list[str] = []
        for cls_name, patterns in self.host_classes.items():
            for pattern in patterns:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    issues.append(f"host_classes.{cls_name}: {pattern!r} is not a regex ({exc})")
        if self.kind == "ufm":
            if self.url is None:
                issues.append("kind ufm needs url")
            if self.auth is None:
                issues.append("kind ufm needs auth: basic or token")
            if self.path is not None:
                issues.append("path only applies to kind ibnetdiscover (a saved output)")
        else:
            used = [name for name in ("url", "auth", "username", "password", "token") if getattr(self, name)]
            if used:
                issues.append(
                    f"{', '.join(used)} only apply to kind ufm (ibnetdiscover runs locally on the host)"
                )
        if self.auth == "basic":
            if self.username is None or self.password is None:
                issues.append("auth basic needs username and password: {env: VAR} or {file: PATH}")
            if self.token is not None:
                issues.append("token is not used with auth basic")
        elif self.auth == "token":
            if self.token is None:
                issues.append("auth token needs token: {env: VAR} or {file: PATH}")
            if self.password is not None:
                issues.append("password is not used with auth token")
        if not self.verify_tls and self.ca_file is not None:
            issues.append("ca_file has no effect with verify_tls: false")
        if issues:
            raise PydanticCustomError("fabric_manager", "{issues}", {"issues": "; ".join(issues)})
        return self


class PrometheusSource(_Model):
    """A Prometheus HTTP API to query DCGM series from (range queries every ``step_s``)."""

    name: Name
    url: HttpUrl
    step_s: Annotated[float, Field(gt=0, le=86400, allow_inf_nan=False)] = 30.0
    query: NonEmptyStr | None = None
    """PromQL selecting the series to read; default: every DCGM_FI_*/DCGM_EXP_* and workload gauge."""
    timeout_s: TimeoutS = 30.0
    retries: Retries = 3


class DcgmExporterSource(_Model):
    """dcgm-exporter endpoints scraped directly: a list of ``urls`` or a Prometheus file_sd file."""

    name: Name
    urls: Annotated[list[HttpUrl], Field(min_length=1)] | None = None
    targets_file: ConfigPath | None = None
    timeout_s: TimeoutS = 10.0

    @model_validator(mode="after")
    def _one_way_to_find_targets(self) -> DcgmExporterSource:
        if (self.urls is None) == (self.targets_file is None):
            raise PydanticCustomError("dcgm_exporter", "set exactly one of urls or targets_file")
        return self


class NvlinkSource(_Model):
    """Where NVLink domains come from: the GFD ``nvidia.com/gpu.clique`` labels of a cluster's
    nodes (``kubernetes``, naming a ``sources.kubernetes`` entry), or a saved file: ``gfd_labels``
    (``kubectl get nodes -o json``), ``nvidia_smi`` (the fabric CSV of one ``node``), ``nmx``
    (NetQ NMX compute-nodes JSON)."""

    name: Name
    kind: Literal["kubernetes", "gfd_labels", "nvidia_smi", "nmx"]
    cluster: NonEmptyStr | None = None
    path: ConfigPath | None = None
    node: NonEmptyStr | None = None

    @model_validator(mode="after")
    def _inputs_fit_kind(self) -> NvlinkSource:
        if self.kind == "kubernetes":
            if self.cluster is None or self.path is not None:
                raise PydanticCustomError("nvlink", "kind kubernetes needs cluster (and no path)")
        elif self.path is None:
            raise PydanticCustomError("nvlink", "kind {kind} needs path (a saved file)", {"kind": self.kind})
        if self.kind == "nvidia_smi" and self.node is None:
            raise PydanticCustomError("nvlink", "kind nvidia_smi needs node: the host the CSV was taken on")
        return self


class KubernetesSource(_Model):
    """A cluster to read pods from and publish labels to. Nothing set means the default kubeconfig."""

    name: Name
    kubeconfig: ConfigPath | None = None
    context: NonEmptyStr | None = None
    in_cluster: bool = False
    api_url: HttpUrl | None = None

    @model_validator(mode="after")
    def _in_cluster_excludes_kubeconfig(self) -> KubernetesSource:
        if self.in_cluster and (self.kubeconfig is not None or self.context is not None):
            raise PydanticCustomError(
                "kubernetes", "in_cluster: true uses the pod's service account; remove kubeconfig/context"
            )
        return self


# --------------------------------------------------------------------------------------------
# Uniqueness: checked by the models (so direct construction is safe) and again on the raw data by
# the loader (so duplicates are reported even when the list has other errors).
# --------------------------------------------------------------------------------------------


def _key_part(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, str | int | float | date):
        return None
    return str(value)


def _get(item: Any, name: str) -> Any:
    if isinstance(item, Mapping):
        return item.get(name)
    return getattr(item, name, None)


def _name_key(field_name: str) -> Callable[[Any], str | None]:
    def key(item: Any) -> str | None:
        return _key_part(_get(item, field_name))

    return key


def _rate_card_key(item: Any) -> str | None:
    model, tier = _key_part(_get(item, "gpu_model")), _key_part(_get(item, "tier"))
    if model is None or tier is None:
        return None
    when = _get(item, "effective_from")
    if when is None:
        return f"gpu_model {model}, tier {tier}, no effective_from"
    when_text = _key_part(when)
    if when_text is None:
        return None
    return f"gpu_model {model}, tier {tier}, effective_from {when_text}"


@dataclass(frozen=True)
class _Unique:
    """A list whose entries must be unique by ``key``; ``field`` is where to point (None: entry)."""

    loc: tuple[str, ...]
    field: str | None
    what: str
    key: Callable[[Any], str | None]


_UNIQUE: tuple[_Unique, ...] = (
    _Unique(("sources", "dcim"), "name", "name", _name_key("name")),
    _Unique(("sources", "switches"), "name", "name", _name_key("name")),
    _Unique(("sources", "fabric_managers"), "name", "name", _name_key("name")),
    _Unique(("sources", "prometheus"), "name", "name", _name_key("name")),
    _Unique(("sources", "dcgm_exporters"), "name", "name", _name_key("name")),
    _Unique(("sources", "kubernetes"), "name", "name", _name_key("name")),
    _Unique(("sources", "nvlink"), "name", "name", _name_key("name")),
    _Unique(("tenants",), "id", "tenant id", _name_key("id")),
    _Unique(("rate_cards",), None, "rate card", _rate_card_key),
)
_UNIQUE_BY_LOC = {rule.loc: rule for rule in _UNIQUE}


def _find_duplicates(items: Sequence[Any], key: Callable[[Any], Hashable | None]) -> list[tuple[int, int]]:
    """(index, index of the first entry with the same key) for every repeated entry."""
    first: dict[Hashable, int] = {}
    found: list[tuple[int, int]] = []
    for index, item in enumerate(items):
        value = key(item)
        if value is None:
            continue
        if value in first:
            found.append((index, first[value]))
        else:
            first[value] = index
    return found


def _refuse_duplicates(loc: tuple[str, ...], items: Sequence[Any]) -> None:
    rule = _UNIQUE_BY_LOC[loc]
    duplicates = _find_duplicates(items, rule.key)
    if duplicates:
        raise PydanticCustomError(
            "duplicate",
            "{count} duplicate {what} entries",
            {"count": len(duplicates), "what": rule.what, "duplicates": tuple(duplicates)},
        )


# --------------------------------------------------------------------------------------------
# The merged source list
# --------------------------------------------------------------------------------------------


def _merge_protocol(kind: str, default: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    inherited = dict(default)
    if kind == "snmp" and "version" in own and "version" in default:
        if _normalise_snmp_version(own["version"]) != _normalise_snmp_version(default["version"]):
            inherited = {k: v for k, v in default.items() if k in _SNMP_TRANSPORT_FIELDS}
    return {**inherited, **own}


def _merge_switch(defaults: Mapping[str, Any], switch: dict[str, Any]) -> dict[str, Any]:
    merged = dict(switch)
    if "platform" in defaults and defaults["platform"] is not None:
        merged.setdefault("platform", defaults["platform"])
    for kind in ("snmp", "ssh"):
        default = defaults.get(kind)
        if not isinstance(default, Mapping):
            continue
        if kind not in merged:
            merged[kind] = dict(default)
        elif isinstance(merged[kind], Mapping):
            merged[kind] = _merge_protocol(kind, default, merged[kind])
        # an explicit null opts out; anything else is reported by validation as it stands
    return merged


def _is_valid(model: type[BaseModel], data: Any, info: ValidationInfo) -> bool:
    try:
        model.model_validate(data, context=info.context)
    except ValidationError:
        return False
    return True


class Sources(_Model):
    """Everything gpufabric collects from."""

    dcim: list[DcimSource] = []
    switch_defaults: SwitchDefaults | None = None
    switches: list[Switch] = []
    collection: CollectionSettings = CollectionSettings()
    fabric_managers: list[FabricManagerSource] = []
    prometheus: list[PrometheusSource] = []
    dcgm_exporters: list[DcgmExporterSource] = []
    kubernetes: list[KubernetesSource] = []
    nvlink: list[NvlinkSource] = []

    @model_validator(mode="after")
    def _nvlink_clusters_exist(self) -> Sources:
        clusters = {k.name for k in self.kubernetes}
        for i, item in enumerate(self.nvlink):
            if item.kind == "kubernetes" and item.cluster not in clusters:
                known = ", ".join(sorted(clusters)) or "none configured"
                message = f"nvlink[{i}].cluster {item.cluster!r} is not a sources.kubernetes name ({known})"
                raise PydanticCustomError("nvlink", message.replace("{", "{{").replace("}", "}}"))
        return self

    @model_validator(mode="before")
    @classmethod
    def _apply_switch_defaults(cls, data: Any, info: ValidationInfo) -> Any:
        """Merge defaults into each switch before validation.

        Invalid defaults (or collection settings) are not merged: their own errors are reported
        once at their own path, instead of once per switch at a misleading one.
        """
        if not isinstance(data, dict) or not isinstance(data.get("switches"), list):
            return data
        defaults = data.get("switch_defaults")
        if defaults is None:
            defaults = {}
        elif not isinstance(defaults, dict) or not _is_valid(SwitchDefaults, defaults, info):
            defaults = None
        collection = data.get("collection")
        if collection is None:
            collection = {}
        elif not isinstance(collection, dict) or not _is_valid(CollectionSettings, collection, info):
            collection = None
        transport = CollectionSettings.model_validate(collection) if collection is not None else None
        switches: list[Any] = []
        for switch in data["switches"]:
            if isinstance(switch, dict):
                if defaults:
                    switch = _merge_switch(defaults, switch)
                snmp = switch.get("snmp")
                if transport is not None and isinstance(snmp, dict):
                    # collection.timeout_s/retries are the SNMP defaults unless set closer to the switch
                    switch = {
                        **switch,
                        "snmp": {"timeout_s": transport.timeout_s, "retries": transport.retries, **snmp},
                    }
            switches.append(switch)
        return {**data, "switches": switches}

    @field_validator("dcim")
    @classmethod
    def _unique_dcim(cls, value: list[DcimSource]) -> list[DcimSource]:
        _refuse_duplicates(("sources", "dcim"), value)
        return value

    @field_validator("switches")
    @classmethod
    def _unique_switches(cls, value: list[Switch]) -> list[Switch]:
        _refuse_duplicates(("sources", "switches"), value)
        return value

    @field_validator("fabric_managers")
    @classmethod
    def _unique_fabric_managers(cls, value: list[FabricManagerSource]) -> list[FabricManagerSource]:
        _refuse_duplicates(("sources", "fabric_managers"), value)
        return value

    @field_validator("prometheus")
    @classmethod
    def _unique_prometheus(cls, value: list[PrometheusSource]) -> list[PrometheusSource]:
        _refuse_duplicates(("sources", "prometheus"), value)
        return value

    @field_validator("nvlink")
    @classmethod
    def _unique_nvlink(cls, value: list[NvlinkSource]) -> list[NvlinkSource]:
        _refuse_duplicates(("sources", "nvlink"), value)
        return value

    @field_validator("dcgm_exporters")
    @classmethod
    def _unique_dcgm_exporters(cls, value: list[DcgmExporterSource]) -> list[DcgmExporterSource]:
        _refuse_duplicates(("sources", "dcgm_exporters"), value)
        return value

    @field_validator("kubernetes")
    @classmethod
    def _unique_kubernetes(cls, value: list[KubernetesSource]) -> list[KubernetesSource]:
        _refuse_duplicates(("sources", "kubernetes"), value)
        return value


# --------------------------------------------------------------------------------------------
# Tenants, money, publishing, warehouse
# --------------------------------------------------------------------------------------------


class Tenant(_Model):
    """A team that consumes GPUs: its id becomes a label value and a Kueue ClusterQueue name part."""

    id: LabelValue
    name: NonEmptyStr
    cohort: DnsSubdomain | None = None
    tiers: Annotated[list[LabelValue], Field(min_length=1)]
    gpu_quota: dict[NonEmptyStr, Annotated[int, Field(ge=0)]] | None = None

    @field_validator("tiers")
    @classmethod
    def _unique_tiers(cls, value: list[str]) -> list[str]:
        repeated = sorted({tier for tier in value if value.count(tier) > 1})
        if repeated:
            raise PydanticCustomError(
                "duplicate_tier", "tier '{tier}' is listed twice", {"tier": repeated[0]}
            )
        return value


class RateCard(_Model):
    """Price of one GPU hour for a model and tier, from ``effective_from`` on (always, if unset).

    Money is ``Decimal`` so that summing millions of GPU-seconds does not drift in the last cent.
    """

    gpu_model: NonEmptyStr
    tier: LabelValue
    usd_per_gpu_hour: Annotated[Decimal, Field(gt=0, allow_inf_nan=False)]
    effective_from: date | None = None


class PublishSettings(_Model):
    """Guards for everything that writes to a cluster (labels, Kueue objects, GitOps files)."""

    dry_run: bool = False
    max_node_change_fraction: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 0.2
    field_manager: Annotated[NonEmptyStr, Field(max_length=128)] = "gpufabric"
    gitops_dir: ConfigPath | None = None


class WarehouseSettings(_Model):
    """The Postgres URL (it embeds a password, hence a secret reference).

    When unset, ``GPUFABRIC_DATABASE_URL`` or the embedded server is used; that choice is made
    by ``connectors.warehouse``, not here.
    """

    url: SecretRef | None = None


class Settings(_Model):
    """The whole of ``gpufabric.yaml``. Build it with ``load_settings`` for file/line errors."""

    version: Literal[1]
    label_prefix: DnsSubdomain = "gpufabric.io"
    topology_label_scheme: Literal["gpufabric", "topograph"] = "gpufabric"
    sources: Sources = Sources()
    tenants: list[Tenant] = []
    rate_cards: list[RateCard] = []
    publish: PublishSettings = PublishSettings()
    warehouse: WarehouseSettings = WarehouseSettings()

    _source_path: Path | None = PrivateAttr(default=None)

    @property
    def source_path(self) -> Path | None:
        """The file this was loaded from, if any (for "using /etc/gpufabric.yaml" messages)."""
        return self._source_path

    @field_validator("tenants")
    @classmethod
    def _unique_tenants(cls, value: list[Tenant]) -> list[Tenant]:
        _refuse_duplicates(("tenants",), value)
        return value

    @field_validator("rate_cards")
    @classmethod
    def _unique_rate_cards(cls, value: list[RateCard]) -> list[RateCard]:
        _refuse_duplicates(("rate_cards",), value)
        return value


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
                f"the file is not UTF-8 text (byte 0x{data[exc.start]:02x} at column {column}); "
                "save it as UTF-8",
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
            problems.append(
                Problem(_unknown_key(loc), source=source, line=line, path=_format_path(loc[:-1], data))
            )
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


def parse_settings(
    text: str | bytes, source: str = "<string>", *, base_dir: str | Path | None = None
) -> Settings:
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
        raise SettingsError(
            Problem("the file is empty; it needs at least 'version: 1'", source=source, line=1)
        )
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
        raise SettingsError(
            [*problems, Problem(bad_value.message, source=source, line=bad_value.line)]
        ) from None
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
