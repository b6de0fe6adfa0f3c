"""The pydantic models of ``gpufabric.yaml``: field types, secrets, sources, tenants, guards."""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    AwareDatetime,
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

from settings.errors import (
    INLINE_SECRET_MESSAGE,
    MAX_SECRET_BYTES,
    Platform,
    SecretError,
)

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
            "'{value}' is not a valid DNS subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)",
            {"value": value[:80]},
        )
    return value


def _check_label_key(value: str) -> str:
    """A Kubernetes label key: an optional DNS-subdomain prefix and '/', then a name (a label value
    that is not empty). It lands in SQL the cost models run, so nothing else gets through."""
    prefix, slash, name = value.rpartition("/")
    prefix_ok = not slash or (len(prefix) <= 253 and _DNS_SUBDOMAIN_RE.fullmatch(prefix) is not None)
    if not prefix_ok or len(name) > 63 or not _LABEL_VALUE_RE.fullmatch(name):
        raise PydanticCustomError(
            "label_key",
            "'{value}' is not a valid Kubernetes label key ([prefix/]name: a DNS subdomain prefix, a name of at "
            "most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)",
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
        raise PydanticCustomError("address", "must be a hostname or an IP address (put ports under snmp/ssh, not here)")
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
            "credentials must not be written into the URL; use username plus password: {env: VAR} or {file: PATH}",
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
LabelKey = Annotated[str, AfterValidator(_check_label_key)]
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
            raise PydanticCustomError("switch", "needs snmp or ssh settings (here or in sources.switch_defaults)")
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
    allow_plain_http: bool = False  # an http:// url sends the credentials in clear: a lab's choice only
    timeout_s: TimeoutS = 30.0
    retries: Retries = 3
    # kind ibnetdiscover: a saved output to load instead of running the command on this host.
    path: ConfigPath | None = None
    # Extra host-name regexes per class (exclude, ufm, storage, login, management), on top of the
    # built-in rules of core/infiniband.py: those HCAs become findings, not compute hosts.
    host_classes: dict[Literal["exclude", "ufm", "storage", "login", "management"], list[NonEmptyStr]] = Field(
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
            if self.url is not None and urlsplit(self.url).scheme.lower() == "http" and not self.allow_plain_http:
                issues.append("url is plain http: UFM's credentials would cross the network in clear; use "
                              "https:// (or allow_plain_http: true for a lab UFM)")
        else:
            used = [name for name in ("url", "auth", "username", "password", "token") if getattr(self, name)]
            if used:
                issues.append(f"{', '.join(used)} only apply to kind ufm (ibnetdiscover runs locally on the host)")
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


class GpuTopoSource(_Model):
    """A directory where a node agent drops each node's ``nvidia-smi topo -m`` output as
    ``<host><suffix>`` (the file's modification time is the capture time)."""

    name: Name
    path: ConfigPath
    suffix: NonEmptyStr = ".txt"


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
    _Unique(("sources", "gpu_topo"), "name", "name", _name_key("name")),
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
    gpu_topo: list[GpuTopoSource] = []

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

    @field_validator(
        "dcim", "switches", "fabric_managers", "prometheus", "nvlink", "dcgm_exporters", "kubernetes", "gpu_topo"
    )
    @classmethod
    def _unique_names(cls, value: list[Any], info: ValidationInfo) -> list[Any]:
        _refuse_duplicates(("sources", str(info.field_name)), value)
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
    # Kueue borrowingLimit / lendingLimit as fractions of the nominal quota (default 1.0 and 0.5).
    borrowing_fraction: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] | None = None
    lending_fraction: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None

    @field_validator("tiers")
    @classmethod
    def _unique_tiers(cls, value: list[str]) -> list[str]:
        repeated = sorted({tier for tier in value if value.count(tier) > 1})
        if repeated:
            raise PydanticCustomError("duplicate_tier", "tier '{tier}' is listed twice", {"tier": repeated[0]})
        return value


class RateCard(_Model):
    """Price of one GPU hour for a model and tier, from ``effective_from`` on (always, if unset).

    Money is ``Decimal`` so that summing millions of GPU-seconds does not drift in the last cent.
    """

    gpu_model: NonEmptyStr
    tier: Annotated[str, AfterValidator(lambda v: v if v == "*" else _check_label_value(v))]
    """A tier (label value), or ``*``: every tier without a card of its own, and idle capacity."""
    usd_per_gpu_hour: Annotated[Decimal, Field(gt=0, allow_inf_nan=False)]
    effective_from: date | None = None
    # The site file is the only price list (core/finops/price_book.py
    # checks overlaps, currency codes and list >= price across cards). Amounts are in `currency`.
    list_usd_per_gpu_hour: Annotated[Decimal, Field(gt=0, allow_inf_nan=False)] | None = None
    """Undiscounted price (FOCUS ListUnitPrice); unset: the model's ``*`` card, else the price."""
    currency: Annotated[str, Field(pattern=r"^[A-Z]{3}$")] = "USD"
    effective_to: date | None = None
    """Exclusive end (UTC date); unset: until the next card of the same model and tier."""


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


# --------------------------------------------------------------------------------------------
# Budget controller (agent-tree envelopes; core.budget.BudgetConfig is built from this by
# settings.budget.budget_config_from_settings)
# --------------------------------------------------------------------------------------------

_ENVELOPE_KEY_RE = re.compile(
    r"\*|[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?(/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?"
)
_NAMESPACE_RE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
NonNegativeDecimal = Annotated[Decimal, Field(ge=0, allow_inf_nan=False)]


def _check_namespace(value: str) -> str:
    if not _NAMESPACE_RE.fullmatch(value):
        raise PydanticCustomError(
            "namespace", "'{value}' is not a Kubernetes namespace name (lowercase DNS label)", {"value": value[:80]}
        )
    return value


def _key_checker(pattern: re.Pattern[str], what: str) -> Callable[[str], str]:
    """Dict keys are validated as a type of their own, so a bad key is reported together with
    every problem in the values (and points at the key's line)."""

    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise PydanticCustomError("budget_key", "'{key}' is not {what}", {"key": value[:80], "what": what})
        return value

    return check


_LABEL_KEY_RE = re.compile(r"\*|[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
EnvelopeKey = Annotated[
    str, AfterValidator(_key_checker(_ENVELOPE_KEY_RE, '"*", a client or "client/tier" (label values)'))
]
AgentTypeKey = Annotated[str, AfterValidator(_key_checker(_LABEL_KEY_RE, '"*" or an agent type (a label value)'))]
TierKey = Annotated[str, AfterValidator(_key_checker(_LABEL_KEY_RE, '"*" or a tier (a label value)'))]


class EnvelopeDefaults(_Model):
    """A default envelope: what a whole agent tree may use when its root pod carries no
    ``<prefix>/envelope`` annotation (annotation keys it lacks are taken from here too)."""

    gpu_hours: NonNegativeDecimal
    cost_usd: NonNegativeDecimal
    max_live_pods: Annotated[int, Field(ge=1, le=1_000_000)]
    max_depth: Annotated[int, Field(ge=0, le=256)]
    max_fan_out: Annotated[int, Field(ge=1, le=1_000_000)]
    deadline: AwareDatetime | None = None


class BudgetReconcilerSettings(_Model):
    """The enforcement loop (``python -m controllers budget-reconciler``)."""

    alert_only: bool = False
    """Record an alert per tree over its envelope and change nothing."""
    period_s: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] = 10.0
    stop_deadline_s: Annotated[int, Field(ge=1, le=86400)] = 30
    """activeDeadlineSeconds given to a running leaf when its tree is stopped; a leaf older than
    this is deleted instead."""


class BudgetSettlementSettings(_Model):
    """Settle-on-finish: how long to wait for the cost fact (core.budget.SettlementPolicy)."""

    cost_wait_s: Annotated[int, Field(ge=0, le=30 * 86400)] = 3600
    unseen_after_s: Annotated[int, Field(ge=60, le=30 * 86400)] = 900


class BudgetSettings(_Model):
    """Agent-tree budgets: envelopes, reservation estimates and the enforcement loop."""

    governed_namespaces: (
        Annotated[list[Annotated[str, AfterValidator(_check_namespace)]], Field(min_length=1)] | None
    ) = None
    """Namespaces the budget controller governs; unset means every namespace the webhook is sent.
    An empty list is refused: it would govern nothing, silently admitting every pod unaccounted."""
    unlabeled_pods: Literal["deny", "default"] = "deny"
    envelopes: dict[EnvelopeKey, EnvelopeDefaults] = {}
    """Default envelopes keyed by "client/tier", "client" or "*" (the most specific wins)."""
    expected_hours: dict[AgentTypeKey, NonNegativeDecimal] = {}
    """Expected run time per agent type (``<prefix>/agent-type``), "*" for the rest (default 1)."""
    usd_per_gpu_hour: dict[TierKey, NonNegativeDecimal] = {}
    """Flat estimate per tier, "*" for the rest; unset means the highest rate card of each tier."""
    reconciler: BudgetReconcilerSettings = BudgetReconcilerSettings()
    settlement: BudgetSettlementSettings = BudgetSettlementSettings()

    @field_validator("governed_namespaces")
    @classmethod
    def _unique_namespaces(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            repeated = sorted({ns for ns in value if value.count(ns) > 1})
            if repeated:
                raise PydanticCustomError(
                    "duplicate_namespace", "namespace '{ns}' is listed twice", {"ns": repeated[0]}
                )
        return value


# --------------------------------------------------------------------------------------------
# Burst admission (issue 20): the lag watch and its SLO
# --------------------------------------------------------------------------------------------

BurstSeconds = Annotated[float, Field(gt=0, le=86400, allow_inf_nan=False)]


class BurstSettings(_Model):
    """Scheduling lag of agent pods (``assets/agents/burst_lag.py``, mart
    ``efficiency.pod_scheduling_lag_5m``)."""

    lag_slo_s: BurstSeconds = 90.0
    """p99 seconds from a pod's creation to Running that the asset check accepts, per tenant,
    tier, agent type and 5 minutes; a pod still waiting longer than this also fails it."""
    watch_s: BurstSeconds = 45.0
    """How long each run of the lag asset watches (its schedule runs every minute; a burst
    measurement sets the burst's length plus its drain). ``GPUFABRIC_BURST_WATCH_SECONDS``
    overrides it for one-shot runs."""
    lookback_s: Annotated[float, Field(ge=0, le=7 * 86400, allow_inf_nan=False)] = 900.0
    """Pods created up to this long before the watch starts are landed too (a burst already under
    way, a pod still pending from the run before)."""


# --------------------------------------------------------------------------------------------
# MIG partitioning (issue 21; core.mig plans, services.mig applies through mig-manager)
# --------------------------------------------------------------------------------------------


class MigSlice(_Model):
    """Instances a tenant wants on one GPU model: a ``profile`` (``1g.10gb``), or ``memory_gib`` and
    ``compute_slices`` (the smallest profile serving them), or ``whole_gpu`` (MIG disabled)."""

    model: NonEmptyStr  # a core.mig model name, GFD product or NVML name (H100-80GB, NVIDIA-H100-80GB-HBM3)
    count: Annotated[int, Field(ge=1, le=1_000_000)] = 1
    profile: NonEmptyStr | None = None
    memory_gib: Annotated[float, Field(gt=0, le=1024, allow_inf_nan=False)] | None = None
    compute_slices: Annotated[int, Field(ge=1, le=7)] = 1
    media: bool = False
    whole_gpu: bool = False


class MigTenant(_Model):
    """One tenant's isolation class and slice demand."""

    tenant: Name
    isolation: Literal["dedicated", "mig", "shared"] = "mig"
    slices: list[MigSlice] = []


def _demo_mig_tenants() -> list[MigTenant]:
    """The demo's demand (H100 80GB nodes of the shipped specs): a regulated tenant alone on its
    GPUs, inference agents on 1g slices, research sharing small instances."""
    h100 = "H100-80GB"
    return [
        MigTenant(tenant="regulated", isolation="dedicated", slices=[MigSlice(model=h100, count=2, profile="3g.40gb")]),
        MigTenant(tenant="inference", isolation="mig", slices=[MigSlice(model=h100, count=14, profile="1g.10gb")]),
        MigTenant(tenant="research", isolation="shared",
                  slices=[MigSlice(model=h100, count=4, memory_gib=16, compute_slices=2)]),
    ]  # fmt: skip


_MIG_PREFIX_RE = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"  # config names are label values: <prefix>-<digest>


class MigSettings(_Model):
    """MIG demand and the guards of applying layouts (``gpufabric mig``, asset ``mig/plan``)."""

    tenants: list[MigTenant] = Field(default_factory=_demo_mig_tenants)
    max_gpus_per_window: Annotated[int, Field(ge=1, le=4096)] = 8
    windows: Annotated[int, Field(ge=1, le=1000)] = 4
    max_node_change_fraction: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 0.25
    field_manager: Annotated[NonEmptyStr, Field(max_length=128)] = "gpufabric-mig"
    config_namespace: Name = "gpu-operator"
    config_map: Name = "custom-mig-config"
    config_prefix: Annotated[str, Field(min_length=1, max_length=50, pattern=_MIG_PREFIX_RE)] = "gpufabric"
    apply_timeout_s: Annotated[float, Field(gt=0, le=86400, allow_inf_nan=False)] = 900.0
    """How long one window may take before a node not at ``success`` is reported stuck."""
    history_hours: Annotated[int, Field(ge=1, le=24 * 366)] | None = None
    """When set, the plan's demand is the site file's completed by the last ``history_hours`` of the
    warehouse (cost fact and DCGM framebuffer use; ``services.mig.history``); site-file slices win."""

    @field_validator("tenants")
    @classmethod
    def _unique_mig_tenants(cls, value: list[MigTenant]) -> list[MigTenant]:
        names = [t.tenant for t in value]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"tenant(s) listed twice: {', '.join(twice)}")
        return value


class FinOpsSettings(_Model):
    """What the cost models need from the site; passed to dbt as vars (``Settings.dbt_vars``)."""

    # The node label naming the tenant a node belongs to (its idle and stranded capacity goes to
    # that tenant's idle line). Default: <label_prefix>/owner.
    owner_label: LabelKey | None = None
    # Who carries the idle capacity of nodes without an owner label (default: nobody, SubAccountId NULL).
    idle_owner: LabelValue | None = None


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
    budget: BudgetSettings = BudgetSettings()
    burst: BurstSettings = BurstSettings()
    mig: MigSettings = MigSettings()
    finops: FinOpsSettings = FinOpsSettings()

    _source_path: Path | None = PrivateAttr(default=None)

    def dbt_vars(self) -> dict[str, str]:
        """The site's answers to the dbt models' vars (every dbt build the site runs passes them)."""
        found = {"finops_owner_label": self.finops.owner_label or f"{self.label_prefix}/owner"}
        if self.finops.idle_owner is not None:
            found["finops_idle_owner"] = self.finops.idle_owner
        return found

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
