"""Tests for ``settings``: the messages operators see, secrets, merging, hostile input.

Most error tests load a real file named ``gpufabric.yaml`` from the working directory, so the
asserted text is exactly what the CLI prints (``gpufabric.yaml:14: sources.switches[2]...``).
"""

from __future__ import annotations

import contextlib
import os
import random
import textwrap
import threading
import traceback
from collections.abc import Callable
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from pydantic import SecretStr, ValidationError

from settings import (
    INLINE_SECRET_MESSAGE,
    KNOWN_PLATFORMS,
    MAX_FILE_BYTES,
    SecretError,
    SecretRef,
    Settings,
    SettingsError,
    load_settings,
    parse_settings,
)

Load = Callable[[str | bytes], Settings]
Fail = Callable[..., str]  # (text, *secrets) -> the refusal message

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "gpufabric.example.yaml"

# Text that must never reach an operator: tracebacks, pydantic's own rendering and its URLs.
NOT_FOR_HUMANS = (
    "Traceback",
    'File "',
    "errors.pydantic.dev",
    "pydantic",
    "validation error",
    "[type=",
    "input_value",
    "Value error,",
)


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


def yaml_text(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    """1-based line of the n-th line containing ``needle`` (so expectations follow the text)."""
    hits = [number for number, line in enumerate(text.splitlines(), start=1) if needle in line]
    assert len(hits) >= occurrence, f"{needle!r} not in test text"
    return hits[occurrence - 1]


def assert_clean(error: SettingsError, *secrets: str) -> str:
    """The message is for humans, carries no secret, and drags no pydantic error along."""
    message = str(error)
    for bad in NOT_FOR_HUMANS:
        assert bad not in message, f"{bad!r} leaked into: {message}"
    for secret in secrets:
        assert secret not in message
    # a chained ValidationError would print the raw input (the secret) in any traceback
    assert error.__cause__ is None
    assert error.__suppress_context__ or error.__context__ is None
    rendered = "".join(traceback.format_exception(error))
    assert "errors.pydantic.dev" not in rendered
    for secret in secrets:
        assert secret not in rendered
    return message


@pytest.fixture()
def load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Load:
    """Write ``gpufabric.yaml`` in a temp cwd and load it by its relative name."""
    monkeypatch.chdir(tmp_path)

    def _load(text: str | bytes) -> Settings:
        target = tmp_path / "gpufabric.yaml"
        if isinstance(text, bytes):
            target.write_bytes(text)
        else:
            target.write_text(text, encoding="utf-8")
        return load_settings("gpufabric.yaml")

    return _load


@pytest.fixture()
def fail(load: Load) -> Fail:
    """Load text that must be refused; return the (checked clean) message."""

    def _fail(text: str | bytes, *secrets: str) -> str:
        with pytest.raises(SettingsError) as caught:
            load(text)
        return assert_clean(caught.value, *secrets)

    return _fail


SWITCHES = yaml_text(
    """
    version: 1
    sources:
      switches:
        - name: leaf-01
          address: 10.0.0.1
          platform: arista_eos
          snmp: {version: "2c", community: {env: SNMP_COMMUNITY}}
        - name: leaf-02
          address: 10.0.0.2
          platform: arista_eos
          snmp: {version: "2c", community: {env: SNMP_COMMUNITY}}
        - name: spine-01
          address: 10.0.0.3
          snmp: {version: "2c", community: S3cr3t-Community-Value}
          platform: sonic
    """
)


# ----------------------------------------------------------------------------------------------
# the example and the happy path
# ----------------------------------------------------------------------------------------------


def test_example_file_loads_and_covers_every_section() -> None:
    settings = load_settings(EXAMPLE)
    assert settings.source_path == EXAMPLE
    for section in Settings.model_fields:
        assert f"\n{section}:" in "\n" + EXAMPLE.read_text(), f"example lacks top-level {section}"
    sources = settings.sources
    for kind in ("dcim", "switches", "fabric_managers", "prometheus", "dcgm_exporters", "kubernetes"):
        assert getattr(sources, kind), f"example has no {kind}"
    assert sources.switch_defaults is not None and sources.switch_defaults.platform == "arista_eos"
    assert sources.switch_defaults.snmp is not None and sources.switch_defaults.snmp.user == "gpufabric-ro"
    # relative paths resolve against the example's folder, not the cwd
    assert sources.dcim[0].path == REPO_ROOT / "inventory/devices.csv"
    assert sources.dcim[1].format == "yaml"  # inferred from .yaml
    leaf = sources.switches[0]
    assert leaf.platform == "arista_eos" and leaf.snmp is not None and leaf.snmp.security_level == "authPriv"
    assert settings.rate_cards[0].usd_per_gpu_hour == Decimal("2.85")
    assert settings.rate_cards[1].effective_from == date(2025, 1, 1)
    assert settings.dbt_vars() == {"finops_owner_label": "gpufabric.io/owner", "finops_idle_owner": "platform"}
    assert settings.warehouse.url == SecretRef(env="GPUFABRIC_WAREHOUSE_URL")


def test_dbt_vars_follow_the_label_prefix_and_refuse_a_label_key_that_is_not_one(load: Load, fail: Fail) -> None:
    base = "version: 1\nlabel_prefix: example.com\n"
    # The owner label defaults to the site's own prefix, not ours; no idle owner means none is passed.
    assert load(base).dbt_vars() == {"finops_owner_label": "example.com/owner"}
    assert load(base + "finops: {owner_label: team, idle_owner: ops}\n").dbt_vars() == {
        "finops_owner_label": "team", "finops_idle_owner": "ops"}  # fmt: skip
    # The key lands in the SQL the cost models run: a quote, a space or a second slash is refused.
    for bad in ("\"o'wner\"", "/owner", "a/b/c", "\"Bad Prefix/x\"", "x/"):
        message = fail(base + f"finops: {{owner_label: {bad}}}\n")
        assert "finops.owner_label" in message and "not a valid Kubernetes label key" in message, message
    assert "not a valid Kubernetes label value" in fail(base + "finops: {idle_owner: \"two words\"}\n")


def test_minimal_file_gets_documented_defaults() -> None:
    settings = parse_settings("version: 1\n")
    assert settings.label_prefix == "gpufabric.io"
    assert settings.topology_label_scheme == "gpufabric"
    assert settings.publish.max_node_change_fraction == 0.2
    assert settings.publish.field_manager == "gpufabric"
    assert settings.publish.dry_run is False
    assert settings.sources.collection.concurrency == 64
    assert settings.warehouse.url is None
    assert settings.source_path is None


def test_settings_are_immutable() -> None:
    settings = parse_settings("version: 1\n")
    with pytest.raises(ValidationError):
        settings.label_prefix = "other.io"  # type: ignore[misc]


# ----------------------------------------------------------------------------------------------
# errors: one sentence per problem with file, line, path
# ----------------------------------------------------------------------------------------------


def test_inline_secret_is_refused_with_file_line_and_path_and_never_echoed(fail: Fail) -> None:
    message = fail(SWITCHES, "S3cr3t-Community-Value")
    assert message == (
        "gpufabric.yaml:14: sources.switches[2].snmp.community: "
        "secret values must not be written inline; use {env: VAR} or {file: PATH}"
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("warehouse:\n  url", "postgresql://u:pw-Sekrit9@db/x"),
        ("warehouse:\n  url", "123456789"),  # numbers are secrets too
    ],
)
def test_inline_secret_anywhere(fail: Fail, field: str, value: str) -> None:
    message = fail(f"version: 1\n{field}: {value}\n", value)
    assert message == f"gpufabric.yaml:3: warehouse.url: {INLINE_SECRET_MESSAGE}"


def test_credentials_in_a_url_are_an_inline_secret(fail: Fail) -> None:
    text = yaml_text(
        """
        version: 1
        sources:
          prometheus:
            - name: prom
              url: https://admin:Pa55-in-url@prom.example:9090
        """
    )
    message = fail(text, "Pa55-in-url")
    assert message.startswith(
        "gpufabric.yaml:5: sources.prometheus[0].url: credentials must not be written into the URL"
    )


def test_missing_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SettingsError) as caught:
        load_settings("gpufabric.yaml")
    assert assert_clean(caught.value) == "gpufabric.yaml: file not found"


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(tmp_path)
    assert assert_clean(caught.value) == f"{tmp_path}: is a directory; expected a YAML file"


def test_yaml_syntax_error_names_the_line(fail: Fail) -> None:
    text = "version: 1\nsources:\n  switches:\n    - name: a\n      address: [10.0.0.1\n\npublish: {}\n"
    message = fail(text)
    assert message.startswith("gpufabric.yaml:7: YAML syntax error: ")
    assert len(message.splitlines()) == 1


def test_tab_indentation_is_a_syntax_error_with_line(fail: Fail) -> None:
    message = fail("version: 1\npublish:\n\tdry_run: true\n")
    assert message.startswith("gpufabric.yaml:3: YAML syntax error: ")


@pytest.mark.parametrize(
    ("text", "kind"),
    [("- version: 1\n", "a list"), ("just words\n", "a single value"), ("42\n", "a single value")],
)
def test_top_level_must_be_a_mapping(fail: Fail, text: str, kind: str) -> None:
    assert fail(text) == (
        f"gpufabric.yaml:1: the top level must be a mapping of settings (version, sources, tenants, ...), not {kind}"
    )


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n", "~\n", "\ufeff"])
def test_empty_file(fail: Fail, text: str) -> None:
    assert fail(text) == "gpufabric.yaml:1: the file is empty; it needs at least 'version: 1'"


def test_missing_field_points_at_the_parent_mapping(fail: Fail) -> None:
    text = yaml_text(
        """
        version: 1
        sources:
          switches:
            - name: leaf-01
              platform: sonic
              snmp: {version: "2c", community: {env: C}}
        """
    )
    message = fail(text)
    assert message == "gpufabric.yaml:4: sources.switches[0].address: required field is missing"


def test_missing_version(fail: Fail) -> None:
    message = fail("# site\nlabel_prefix: example.com\n")
    assert message == "gpufabric.yaml:2: version: required field is missing"


def test_missing_nested_field_points_at_its_key(fail: Fail) -> None:
    text = yaml_text(
        """
        version: 1
        sources:
          switches:
            - name: leaf-01
              address: 10.0.0.1
              platform: sonic
              ssh:
                port: 2222
        """
    )
    assert fail(text) == (
        "gpufabric.yaml:7: sources.switches[0].ssh.username: "
        "required field is missing (set it here or in sources.switch_defaults)"
    )


@pytest.mark.parametrize(
    ("snippet", "path", "expected"),
    [
        ("publish:\n  dry_run: sometimes\n", "publish.dry_run", "expected true or false; got a string"),
        ("publish:\n  dry_run: false\n  field_manager: [1]\n", "publish.field_manager", "expected a string"),
        ("sources:\n  switches: {name: a}\n", "sources.switches", "expected a list; got a mapping"),
        ("sources: [a, b]\n", "sources", "expected a mapping; got a list"),
        ("tenants:\n  - id: t\n    name: {a: 1}\n    tiers: [x]\n", "tenants[0].name", "expected a string"),
        ("sources:\n  collection:\n    concurrency: lots\n", "sources.collection.concurrency", "an integer"),
        ("warehouse:\n  url: [x]\n", "warehouse.url", "expected {env: VAR} or {file: PATH}; got a list"),
    ],
)
def test_wrong_type(fail: Fail, snippet: str, path: str, expected: str) -> None:
    text = "version: 1\n" + snippet
    message = fail(text)
    last_key = path.split(".")[-1].split("[")[0]
    assert message.startswith(f"gpufabric.yaml:{line_of(text, last_key + ':')}: {path}: ")
    assert expected in message


def test_unknown_key_suggests_the_closest(fail: Fail) -> None:
    text = SWITCHES.replace("community: S3cr3t-Community-Value", "comunity: {env: C}")
    message = fail(text)
    assert "gpufabric.yaml:14: sources.switches[2].snmp: unknown key 'comunity'; did you mean 'community'?" in message


def test_unknown_top_level_key(fail: Fail) -> None:
    message = fail("version: 1\nsorces: {}\n")
    assert message == "gpufabric.yaml:2: unknown key 'sorces'; did you mean 'sources'?"


def test_unknown_key_without_a_close_match_lists_valid_keys(fail: Fail) -> None:
    message = fail("version: 1\nwarehouse:\n  url: {value: Zz-not-echoed}\n", "Zz-not-echoed")
    assert message == "gpufabric.yaml:3: warehouse.url: unknown key 'value'; valid keys here: env, file"


def test_unknown_platform_lists_the_known_ones(fail: Fail) -> None:
    text = SWITCHES.replace("community: S3cr3t-Community-Value", "community: {env: C}").replace(
        "platform: sonic", "platform: aristaeos"
    )
    message = fail(text)
    line = line_of(text, "aristaeos")
    assert message.startswith(f"gpufabric.yaml:{line}: sources.switches[2].platform: 'aristaeos' is not one of: ")
    assert ", ".join(KNOWN_PLATFORMS) in message
    assert "did you mean 'arista_eos'?" in message


def test_duplicate_switch_names_are_named(fail: Fail) -> None:
    text = SWITCHES.replace("community: S3cr3t-Community-Value", "community: {env: C}").replace(
        "name: spine-01", "name: leaf-01"
    )
    message = fail(text)
    assert message == (
        "gpufabric.yaml:12: sources.switches[2].name: duplicate name 'leaf-01'; "
        "first used at sources.switches[0], line 4"
    )


def test_duplicates_are_reported_even_when_entries_have_other_errors(fail: Fail) -> None:
    text = yaml_text(
        """
        version: 1
        tenants:
          - {id: research, name: R, tiers: [prod]}
          - {id: research, name: R2, tiers: []}
          - {id: "bad id!", name: X, tiers: [prod]}
        """
    )
    lines = fail(text).splitlines()
    assert lines == [
        "gpufabric.yaml:4: tenants[1].id: duplicate tenant id 'research'; first used at tenants[0], line 3",
        "gpufabric.yaml:4: tenants[1].tiers: must not be empty",
        "gpufabric.yaml:5: tenants[2].id: 'bad id!' is not a valid Kubernetes label value (at most 63 "
        "characters: letters, digits, '-', '_' or '.', starting and ending with a letter or digit)",
    ]


def test_duplicate_rate_cards(fail: Fail) -> None:
    text = yaml_text(
        """
        version: 1
        rate_cards:
          - {gpu_model: H100, tier: prod, usd_per_gpu_hour: 2.5, effective_from: 2025-01-01}
          - {gpu_model: H100, tier: prod, usd_per_gpu_hour: 2.0}
          - {gpu_model: H100, tier: prod, usd_per_gpu_hour: 2.4, effective_from: "2025-01-01"}
        """
    )
    assert fail(text) == (
        "gpufabric.yaml:5: rate_cards[2]: duplicate rate card (gpu_model H100, tier prod, "
        "effective_from 2025-01-01); first given at rate_cards[0], line 3"
    )


def test_model_level_uniqueness_without_the_loader() -> None:
    with pytest.raises(ValidationError):
        Settings.model_validate({"version": 1, "tenants": [{"id": "a", "name": "A", "tiers": ["x"]}] * 2})


def test_duplicate_yaml_keys_are_not_silently_resolved(fail: Fail) -> None:
    message = fail("version: 1\npublish:\n  dry_run: true\n  dry_run: false\n")
    assert message == ("gpufabric.yaml:4: publish: duplicate key 'dry_run' (first at line 3); only one may be given")


def test_non_string_key(fail: Fail) -> None:
    message = fail("version: 1\npublish:\n  dry_run: true\n  12: x\n")
    assert message.startswith("gpufabric.yaml:4: publish: key '12' must be a string")


def test_second_document_is_refused(fail: Fail) -> None:
    assert fail("version: 1\n---\nversion: 1\n") == (
        "gpufabric.yaml:2: found a second YAML document ('---'); the file must hold exactly one"
    )


def test_every_problem_is_listed_one_per_line_in_file_order(fail: Fail) -> None:
    text = yaml_text(
        """
        version: 2
        label_prefix: Not_A_Domain
        topology_label_scheme: slurm
        publish:
          max_node_change_fraction: 0
          field_manager: ""
        rate_cards:
          - {gpu_model: H100, tier: prod, usd_per_gpu_hour: -1}
        extra_thing: 1
        """
    )
    lines = fail(text).splitlines()
    assert [line.split(": ")[0:2] for line in lines[:6]] == [
        ["gpufabric.yaml:1", "version"],
        ["gpufabric.yaml:2", "label_prefix"],
        ["gpufabric.yaml:3", "topology_label_scheme"],
        ["gpufabric.yaml:5", "publish.max_node_change_fraction"],
        ["gpufabric.yaml:6", "publish.field_manager"],
        ["gpufabric.yaml:8", "rate_cards[0].usd_per_gpu_hour"],
    ]
    assert lines[6].startswith("gpufabric.yaml:9: unknown key 'extra_thing'; valid keys here: version, ")
    assert len(lines) == 7
    assert lines[0].endswith("version: expected one of: 1; got an integer")
    assert "'slurm' is not one of: gpufabric, topograph" in lines[2]
    assert lines[3].endswith("must be greater than 0")
    assert lines[4].endswith("must not be empty")


def test_very_many_problems_are_capped_in_the_message_but_kept(fail: Fail, load: Load) -> None:
    text = "version: 1\ntenants:\n" + "".join(f"  - {{id: t{i}, name: T, tiers: []}}\n" for i in range(150))
    with pytest.raises(SettingsError) as caught:
        load(text)
    assert len(caught.value.problems) == 150
    lines = str(caught.value).splitlines()
    assert len(lines) == 101
    assert lines[-1] == "... and 50 more problems (fix the ones above first)"


@pytest.mark.parametrize(
    ("switch", "expected"),
    [
        ('snmp: {version: "2c"}', "SNMP v2c needs community"),
        ('snmp: {version: "2c", community: {env: C}, user: u}', 'user only apply to SNMP version "3"'),
        ("snmp: {version: 3}", "SNMPv3 needs user"),
        ("snmp: {version: 3, user: u, community: {env: C}}", "community only applies to SNMP v2c"),
        (
            "snmp: {version: 3, user: u, priv_protocol: AES, priv_key: {env: P}}",
            "SNMPv3 authPriv needs both auth_key and priv_key (auth_key is missing)",
        ),
        ("snmp: {version: 3, user: u, auth_key: {env: A}}", "auth_key and auth_protocol"),
        ("snmp: {version: 1, community: {env: C}}", "'1' is not one of: 2c, 3"),
        ("{}", "needs snmp or ssh settings"),
    ],
)
def test_snmp_credentials_must_match_the_version(fail: Fail, switch: str, expected: str) -> None:
    text = "version: 1\nsources:\n  switches:\n    - name: a\n      address: 10.0.0.1\n      platform: sonic\n"
    if switch == "{}":
        path, line = "sources.switches[0]", 4
    else:
        text += f"      {switch}\n"
        path, line = "sources.switches[0].snmp", 7
    message = fail(text)
    assert message.startswith(f"gpufabric.yaml:{line}: {path}")
    assert expected in message


def test_snmp_version_spellings() -> None:
    for spelling in ("3", "v3", '"3"', "3.0"):
        text = (
            "version: 1\nsources:\n  switches:\n    - name: a\n      address: 10.0.0.1\n"
            f"      platform: sonic\n      snmp: {{version: {spelling}, user: u}}\n"
        )
        snmp = parse_settings(text).sources.switches[0].snmp
        assert snmp is not None and snmp.version == "3" and snmp.security_level == "noAuthNoPriv"


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("{name: u, kind: ufm, auth: basic, url: 'https://ufm'}", "auth basic needs username and password"),
        ("{name: u, kind: ufm, url: 'https://ufm'}", "kind ufm needs auth"),
        ("{name: u, kind: ufm, auth: token, token: {env: T}}", "kind ufm needs url"),
        ("{name: u, kind: ibnetdiscover, url: 'https://x'}", "url only apply to kind ufm"),
        ("{name: u, kind: ufm, url: 'ftp://ufm', auth: token, token: {env: T}}", "must be an http"),
        (
            "{name: u, kind: ufm, url: 'https://u', auth: token, token: {env: T}, verify_tls: false, ca_file: ca.pem}",
            "ca_file has no effect",
        ),
        (
            "{name: u, kind: ufm, url: 'HTTP://ufm:80', auth: basic, username: a, password: {env: P}}",
            "url is plain http: UFM's credentials would cross the network in clear",
        ),
    ],
)
def test_fabric_manager_rules(fail: Fail, entry: str, expected: str) -> None:
    message = fail(f"version: 1\nsources:\n  fabric_managers:\n    - {entry}\n")
    assert message.startswith("gpufabric.yaml:4: sources.fabric_managers[0]")
    assert expected in message


def test_a_lab_may_allow_plain_http_to_ufm() -> None:
    entry = "{name: u, kind: ufm, url: 'http://ufm', auth: token, token: {env: T}, allow_plain_http: true}"
    source = parse_settings(f"version: 1\nsources:\n  fabric_managers:\n    - {entry}\n").sources.fabric_managers[0]
    assert (source.url, source.allow_plain_http) == ("http://ufm", True)


@pytest.mark.parametrize(
    ("section", "entry", "expected"),
    [
        ("kubernetes", "{name: k, in_cluster: true, context: c}", "in_cluster: true uses the pod's"),
        ("dcgm_exporters", "{name: d}", "set exactly one of urls or targets_file"),
        ("dcgm_exporters", "{name: d, urls: ['http://a:9400'], targets_file: t.json}", "exactly one"),
        ("dcgm_exporters", "{name: d, urls: []}", "must not be empty"),
        ("dcim", "{name: d, path: export.txt}", "required field is missing"),
        ("dcim", "{name: d, path: x.csv, format: xlsx}", "'xlsx' is not one of: csv, yaml"),
        ("prometheus", "{name: p, url: 'http://p', step_s: 0}", "must be greater than 0"),
    ],
)
def test_other_source_rules(fail: Fail, section: str, entry: str, expected: str) -> None:
    message = fail(f"version: 1\nsources:\n  {section}:\n    - {entry}\n")
    assert message.startswith(f"gpufabric.yaml:4: sources.{section}[0]")
    assert expected in message


def test_tenant_ids_must_be_label_values(fail: Fail) -> None:
    ok = "a" * 63
    parse_settings(f"version: 1\ntenants:\n  - {{id: {ok}, name: A, tiers: [prod]}}\n")
    message = fail(f"version: 1\ntenants:\n  - {{id: {ok}b, name: A, tiers: [prod]}}\n")
    assert message.startswith("gpufabric.yaml:3: tenants[0].id: ")
    assert "not a valid Kubernetes label value" in message
    parse_settings("version: 1\ntenants:\n  - {id: 42, name: A, tiers: [prod]}\n")  # numbers are fine


def test_publish_fraction_bounds(fail: Fail) -> None:
    publish = parse_settings("version: 1\npublish: {max_node_change_fraction: 1}\n").publish
    assert publish.max_node_change_fraction == 1
    assert fail("version: 1\npublish:\n  max_node_change_fraction: 1.5\n") == (
        "gpufabric.yaml:3: publish.max_node_change_fraction: must be at most 1"
    )


def test_parse_settings_names_its_source() -> None:
    with pytest.raises(SettingsError) as caught:
        parse_settings("version: 1\nbogus: 1\n", source="configmap/gpufabric")
    assert str(caught.value).startswith("configmap/gpufabric:2: unknown key 'bogus'")
    problem = caught.value.problems[0]
    assert (problem.source, problem.line, problem.path) == ("configmap/gpufabric", 2, "")


# ----------------------------------------------------------------------------------------------
# switch_defaults
# ----------------------------------------------------------------------------------------------

DEFAULTS = yaml_text(
    """
    version: 1
    sources:
      collection: {timeout_s: 7, retries: 4}
      switch_defaults:
        platform: arista_eos
        snmp: {version: "3", port: 1161, user: ro, auth_protocol: SHA, auth_key: {env: A},
               priv_protocol: AES, priv_key: {env: P}}
        ssh: {username: netops, key_file: keys/id_ed25519}
      switches:
        - {name: plain, address: 10.0.0.1}
        - name: custom
          address: 10.0.0.2
          platform: sonic
          snmp: {user: other, timeout_s: 2}
          ssh: null
        - name: old
          address: 10.0.0.3
          snmp: {version: "2c", community: {env: C}}
    """
)


def test_switch_defaults_are_merged_into_every_switch(load: Load, tmp_path: Path) -> None:
    plain, custom, old = load(DEFAULTS).sources.switches
    assert plain.platform == "arista_eos"
    assert plain.snmp is not None and plain.snmp.user == "ro" and plain.snmp.port == 1161
    assert plain.snmp.priv_key == SecretRef(env="P") and plain.snmp.security_level == "authPriv"
    assert (plain.snmp.timeout_s, plain.snmp.retries) == (7, 4)  # from collection
    assert plain.ssh is not None and plain.ssh.key_file == tmp_path / "keys/id_ed25519"
    # own keys win, key by key; null opts out
    assert custom.platform == "sonic"
    assert custom.snmp is not None and (custom.snmp.user, custom.snmp.timeout_s) == ("other", 2)
    assert custom.snmp.auth_key == SecretRef(env="A")
    assert custom.ssh is None
    # a different SNMP version keeps only the transport settings
    assert old.snmp is not None and old.snmp.version == "2c" and old.snmp.user is None
    assert old.snmp.port == 1161 and old.snmp.community == SecretRef(env="C")


def test_broken_switch_defaults_are_reported_once_not_per_switch(fail: Fail) -> None:
    text = DEFAULTS.replace("user: ro,", "user: ro, auth_protocol: MD5,").replace("auth_protocol: SHA, ", "")
    message = fail(text)
    assert message == (
        f"gpufabric.yaml:{line_of(text, 'MD5')}: sources.switch_defaults.snmp.auth_protocol: "
        "'MD5' is not one of: SHA, SHA256, SHA512"
    )


def test_inline_secret_in_switch_defaults_points_at_the_defaults(fail: Fail) -> None:
    text = DEFAULTS.replace("priv_key: {env: P}", "priv_key: Defaults-Secret-1")
    message = fail(text, "Defaults-Secret-1")
    assert message == (
        f"gpufabric.yaml:{line_of(text, 'Defaults-Secret-1')}: sources.switch_defaults.snmp.priv_key: "
        f"{INLINE_SECRET_MESSAGE}"
    )


def test_merged_switch_errors_point_at_the_switch(fail: Fail) -> None:
    text = DEFAULTS.replace("auth_key: {env: A},\n", "\n").replace("auth_protocol: SHA, ", "")
    message = fail(text).splitlines()
    assert message[0].startswith(f"gpufabric.yaml:{line_of(text, 'name: plain')}: sources.switches[0].snmp: ")
    assert "authPriv needs both auth_key and priv_key" in message[0]
    custom_line = line_of(text, "snmp: {user: other")
    assert message[1].startswith(f"gpufabric.yaml:{custom_line}: sources.switches[1].snmp")


def test_defaults_in_yaml_anchors_work_too() -> None:
    text = yaml_text(
        """
        version: 1
        x-creds: &creds {version: "2c", community: {env: C}}
        """
    )
    with pytest.raises(SettingsError):  # unknown top-level key, even if used as an anchor
        parse_settings(text)
    text = yaml_text(
        """
        version: 1
        sources:
          switches:
            - name: a
              address: 10.0.0.1
              platform: sonic
              snmp: &creds {version: "2c", community: {env: C}}
            - name: b
              address: 10.0.0.2
              platform: sonic
              snmp: {<<: *creds, port: 1161}
        """
    )
    switches = parse_settings(text).sources.switches
    assert switches[1].snmp is not None and switches[1].snmp.port == 1161
    assert switches[1].snmp.community == SecretRef(env="C")


# ----------------------------------------------------------------------------------------------
# secrets
# ----------------------------------------------------------------------------------------------


def test_secret_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFABRIC_TEST_SECRET", "Env-Value-42\n")
    secret = SecretRef(env="GPUFABRIC_TEST_SECRET").resolve()
    assert isinstance(secret, SecretStr)
    assert secret.get_secret_value() == "Env-Value-42"
    assert "Env-Value-42" not in repr(secret) and "Env-Value-42" not in str(secret)


def test_secret_from_file_relative_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "ufm").write_text("File-Value-7\r\n")
    config = tmp_path / "gpufabric.yaml"
    config.write_text(
        "version: 1\nsources:\n  fabric_managers:\n    - {name: u, kind: ufm, url: 'https://ufm',"
        " auth: token, token: {file: secrets/ufm}}\n"
    )
    settings = load_settings(config)
    token = settings.sources.fabric_managers[0].token
    assert token is not None and token.file == tmp_path / "secrets" / "ufm"
    resolved = token.resolve()
    assert resolved.get_secret_value() == "File-Value-7"
    holder = {"token": resolved, "settings": settings}
    assert "File-Value-7" not in repr(holder) and "File-Value-7" not in str(holder)


def test_missing_and_empty_env_secrets_name_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUFABRIC_TEST_ABSENT", raising=False)
    with pytest.raises(SecretError) as caught:
        SecretRef(env="GPUFABRIC_TEST_ABSENT").resolve()
    assert str(caught.value) == "secret environment variable GPUFABRIC_TEST_ABSENT is not set"
    monkeypatch.setenv("GPUFABRIC_TEST_EMPTY", "\n")
    with pytest.raises(SecretError) as caught:
        SecretRef(env="GPUFABRIC_TEST_EMPTY").resolve()
    assert str(caught.value) == "secret environment variable GPUFABRIC_TEST_EMPTY is empty"
    assert isinstance(caught.value, SettingsError)


def test_secret_file_failures_name_the_file_not_the_content(tmp_path: Path) -> None:
    cases = {
        "absent": (None, "does not exist"),
        "empty": (b"\n", "is empty"),
        "binary": (b"\xff\xfeZz-Binary-Content", "is not UTF-8 text"),
        "huge": (b"Zz-Huge-Content" * 10_000, "is larger than 64 KiB"),
    }
    for name, (content, reason) in cases.items():
        path = tmp_path / name
        if content is not None:
            path.write_bytes(content)
        with pytest.raises(SecretError) as caught:
            SecretRef(file=path).resolve()
        assert str(caught.value).startswith(f"secret file {path} {reason}"), name
        assert "Zz-" not in str(caught.value)
        assert caught.value.__cause__ is None
    with pytest.raises(SecretError, match="is a directory"):
        SecretRef(file=tmp_path).resolve()


def test_secret_ref_needs_exactly_one_source(fail: Fail) -> None:
    assert fail("version: 1\nwarehouse:\n  url: {env: A, file: b}\n") == (
        "gpufabric.yaml:3: warehouse.url: a secret reference needs exactly one of {env: VAR} or {file: PATH}"
    )
    message = fail("version: 1\nwarehouse:\n  url: {env: 'not a name Zz-Typed-Secret'}\n", "Zz-Typed-Secret")
    assert "gpufabric.yaml:3: warehouse.url.env: not a valid environment variable name" in message


def test_pydantic_errors_never_carry_the_inline_value_either() -> None:
    """Direct model use (not via the loader) must not leak the value through pydantic's repr."""
    with pytest.raises(ValidationError) as caught:
        SecretRef.model_validate("Direct-Secret-3")
    assert "Direct-Secret-3" not in str(caught.value)
    assert "Direct-Secret-3" not in repr(caught.value)


# ----------------------------------------------------------------------------------------------
# size and hostile input
# ----------------------------------------------------------------------------------------------


def test_five_thousand_switches_load(load: Load) -> None:
    lines = [
        "version: 1",
        "sources:",
        "  switch_defaults:",
        "    platform: sonic",
        "    snmp: {version: '3', user: ro, auth_protocol: SHA256, auth_key: {env: A},"
        " priv_protocol: AES256, priv_key: {env: P}}",
        "    ssh: {username: netops, password: {file: /run/secrets/ssh}}",
        "  switches:",
    ]
    for i in range(5000):
        lines += [f"    - name: sw-{i:05d}", f"      address: 10.{i // 65536}.{(i // 256) % 256}.{i % 256}"]
    settings = load("\n".join(lines) + "\n")  # how long this takes: bench/bench_settings.py
    assert len(settings.sources.switches) == 5000
    assert settings.sources.switches[4999].name == "sw-04999"
    assert str(settings.sources.switches[4999].address) == "10.0.19.135"
    assert all(s.snmp is not None and s.snmp.security_level == "authPriv" for s in settings.sources.switches)


BILLION_LAUGHS = "version: 1\na0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 10)
)

MERGE_BOMB = "version: 1\nm0: &m0 {k0: v, k1: v}\n" + "".join(
    f"m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * 8)}], x{i}: v}}\n" for i in range(1, 12)
)

KEY_BOMB = "version: 1\nk0: &k0 [a, b, c, d, e, f, g, h]\n" + "".join(
    f"k{i}: &k{i} {{{', '.join(f'? [*k{i - 1}, {j}] : {j}' for j in range(8))}}}\n" for i in range(1, 10)
)


@pytest.mark.parametrize(
    ("text", "expected_line", "expected"),
    [
        (BILLION_LAUGHS, None, "aliases expand the document to more than"),
        (MERGE_BOMB, None, "aliases expand the document to more than"),
        (KEY_BOMB, None, "aliases expand the document to more than"),
        ("version: 1\nx: &a [1, *a]\n", 2, "alias *a is used inside its own anchor"),
        ("version: 1\nx: &a {k: *a}\n", 2, "alias *a is used inside its own anchor"),
        ("version: 1\nx: *nope\n", 2, "alias *nope refers to an anchor that is not defined"),
        ("version: 1\nx: " + "[" * 500 + "]" * 500 + "\n", 2, "nests deeper than 64 levels"),
        ("version: 1\nx: " + "[" * 50_000 + "]" * 50_000 + "\n", 2, "nest"),
        (
            "version: 1\n" + "".join(f"{' ' * 2 * i}k{i}:\n" for i in range(200)) + " " * 400 + "v: 1\n",
            66,
            "nests deeper than 64 levels",
        ),
        (
            "version: 1\nd0: &d0 [x]\n" + "".join(f"d{i}: &d{i} [*d{i - 1}]\n" for i in range(1, 100)),
            None,
            "nests deeper than 64 levels (counting aliases)",
        ),
        ("version: 1\nx: !!python/object/apply:os.system ['touch /tmp/pwned']\n", 2, "could not determine"),
        ("version: 1\nx: !!python/name:os.system\n", 2, "could not determine a constructor"),
        ("version: 1\nx: " + "9" * 5000 + "\n", 2, "not a usable integer"),
        ("version: 1\nrate_cards:\n  - effective_from: 2024-13-45\n", 3, "not a valid date"),
        ("version: 1\n? [a, b]\n: c\n", 2, "unhashable"),
        ("version: 1\nx: !!binary 'AAA'\n", 2, "failed to decode base64 data"),
    ],
)
def test_hostile_yaml_is_refused(fail: Fail, text: str, expected_line: int | None, expected: str) -> None:
    """Refused by the limit named in the message (so never expanded); the time a refusal takes is
    measured against loading the example file in bench/bench_settings.py."""
    message = fail(text)
    assert expected in message
    assert len(message.splitlines()) == 1
    if expected_line is not None:
        assert message.startswith(f"gpufabric.yaml:{expected_line}: ")


def test_aliases_within_limits_are_fine() -> None:
    text = "version: 1\nsources:\n  dcgm_exporters:\n" + "".join(
        f"    - {{name: d{i}, urls: &u{i} ['http://gpu{i}:9400/metrics']}}\n" for i in range(50)
    )
    assert len(parse_settings(text).sources.dcgm_exporters) == 50


def test_non_utf8_bytes_name_the_line(fail: Fail) -> None:
    message = fail(b"version: 1\nlabel_prefix: caf\xe9.io\n")
    assert message == ("gpufabric.yaml:2: the file is not UTF-8 text (byte 0xe9 at column 18); save it as UTF-8")


def test_utf8_bom_is_accepted(load: Load) -> None:
    assert load(b"\xef\xbb\xbfversion: 1\n").version == 1


def test_control_characters_are_refused_with_line(fail: Fail) -> None:
    assert fail("version: 1\nx: a\x00b\n") == (
        "gpufabric.yaml:2: the file contains the control character U+0000 at column 5; is it a binary file?"
    )


@pytest.mark.parametrize("seed", range(5))
def test_binary_junk_is_refused(fail: Fail, seed: int) -> None:
    junk = random.Random(seed).randbytes(64 * 1024)
    message = fail(junk)
    assert message.startswith("gpufabric.yaml:")


def test_oversized_file_is_refused_without_reading_it(fail: Fail, tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as handle:
        handle.truncate(MAX_FILE_BYTES + 1)  # sparse: costs no disk
    with pytest.raises(SettingsError) as caught:
        load_settings(big)
    assert "the limit is 20 MB" in assert_clean(caught.value)


def test_endless_device_is_bounded() -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings("/dev/zero")
    assert str(caught.value) == "/dev/zero: the file is 20.0 MB; the limit is 20 MB (is this the right file?)"


def test_an_endless_stream_is_read_no_further_than_the_limit(tmp_path: Path) -> None:
    """A FIFO that never ends (st_size 0, as /dev/zero): the loader reads the limit and one byte,
    then closes. The writer counts what it managed to hand over; it gives up at four times the
    limit, so an unbounded read fails this test (with 80 MB in the message) instead of hanging."""
    fifo = tmp_path / "endless.yaml"
    os.mkfifo(fifo)
    chunk = b"\0" * 65536
    written = 0

    def feed() -> None:
        nonlocal written
        with contextlib.suppress(BrokenPipeError), fifo.open("wb") as out:
            while written < 4 * MAX_FILE_BYTES:
                out.write(chunk)
                written += len(chunk)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    with pytest.raises(SettingsError) as caught:
        load_settings(fifo)
    writer.join(timeout=60)  # hang guard only: the reader closed, so the next write fails
    assert not writer.is_alive()
    assert str(caught.value) == f"{fifo}: the file is 20.0 MB; the limit is 20 MB (is this the right file?)"
    # what the reader took (limit + 1) plus at most the pipe's buffer and one chunk in flight
    assert MAX_FILE_BYTES < written <= MAX_FILE_BYTES + 1 + 1024 * 1024 + len(chunk)


YAMLISH = st.lists(
    st.sampled_from(
        [
            "version: 1\n",
            "sources:\n",
            "  switches:\n",
            "    - ",
            "name: a",
            "&a ",
            "*a ",
            "&b ",
            "*b ",
            "<<: ",
            "[",
            "]",
            "{",
            "}",
            ", ",
            ": ",
            "? ",
            "\n",
            "  ",
            "\t",
            "'",
            '"',
            "!!str ",
            "!!binary ",
            "!!python/name:os.system ",
            "---\n",
            "...\n",
            "%YAML 1.1\n",
            "- ",
            "x",
            "1",
            "null",
            "~",
            "#",
            "\ufeff",
            "\x85",
            "\u2028",
            "é",
            "|\n",
            ">\n",
            "community: ",
            "{env: A}",
            "2024-02-30",
        ]
    ),
    max_size=40,
).map("".join)


@hypothesis_settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(YAMLISH)
def test_fuzz_yaml_like_text_never_crashes(text: str) -> None:
    try:
        parse_settings(text)
    except SettingsError as error:
        assert_clean(error)


@hypothesis_settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=512), st.text(max_size=512)))
def test_fuzz_arbitrary_input_never_crashes(data: bytes | str) -> None:
    try:
        parse_settings(data)
    except SettingsError as error:
        assert_clean(error)


# ----------------------------------------------------------------------------------------------
# budget: the budget controller's section
# ----------------------------------------------------------------------------------------------


def test_example_budget_section_builds_the_controllers_config() -> None:
    from datetime import UTC, datetime

    from core.budget import Envelope, SettlementPolicy, Unlabeled
    from settings import budget_config_from_settings, settlement_policy_from_settings

    settings = load_settings(EXAMPLE)
    config = budget_config_from_settings(settings)
    assert config.governed_namespaces == frozenset({"agents", "research"})
    assert config.unlabeled is Unlabeled.DENY
    assert config.prefix == settings.label_prefix == "gpufabric.io"
    assert config.default_envelope("research", "preemptible") == Envelope(
        Decimal(400), Decimal(500), 400, 6, 100, datetime(2027, 3, 31, 23, 59, 59, tzinfo=UTC)
    )
    assert config.default_envelope("research", "prod") == Envelope(Decimal(200), Decimal(600), 250, 6, 60)
    assert config.default_envelope("someone", "prod") == Envelope(Decimal(50), Decimal(150), 100, 5, 50)
    assert config.rate("preemptible") == Decimal("1.10") and config.rate("gold") == Decimal("2.85")
    assert config.expected_hours == {"orchestrator": Decimal(4), "reconciler": Decimal("0.5")}
    assert config.default_expected_hours == Decimal(1)
    assert settlement_policy_from_settings(settings) == SettlementPolicy(cost_wait_s=3600, unseen_after_s=900)
    assert settings.budget.reconciler.period_s == 10 and settings.budget.reconciler.stop_deadline_s == 30


def test_budget_defaults_without_the_section() -> None:
    from core.budget import SettlementPolicy, Unlabeled
    from settings import budget_config_from_settings, settlement_policy_from_settings

    settings = parse_settings("version: 1\nlabel_prefix: agents.example.com\n")
    config = budget_config_from_settings(settings)
    # fail closed: no default envelope (a root needs a complete annotation), no price, deny unlabelled
    assert config.defaults == {} and config.rates_usd_per_gpu_hour == {}
    assert config.governed_namespaces is None and config.unlabeled is Unlabeled.DENY
    assert config.default_expected_hours == Decimal(1) and config.expected_hours == {}
    assert config.alert_only is False and config.prefix == "agents.example.com"
    assert settings.budget.reconciler.period_s == 10.0 and settings.budget.reconciler.stop_deadline_s == 30
    assert settlement_policy_from_settings(settings) == SettlementPolicy(3600, 900)


def test_budget_rates_default_to_the_highest_rate_card_per_tier() -> None:
    from settings import budget_config_from_settings

    config = budget_config_from_settings(
        load_settings(EXAMPLE).model_copy(update={"budget": parse_settings("version: 1\n").budget})
    )
    # rate cards: H100 prod 2.85 and 2.49, H100 preemptible 1.10, A100 preemptible 0.95
    assert config.rates_usd_per_gpu_hour == {
        "prod": Decimal("2.85"),
        "preemptible": Decimal("1.10"),
        "*": Decimal("2.85"),
    }


def test_bad_budget_section_names_every_problem_with_line_and_path(fail: Fail) -> None:
    text = yaml_text(
        """
        version: 1
        budget:
          governed_namespaces: [Agents, ok, ok]
          unlabeled_pods: dney
          envelopes:
            "a/b/c": {gpu_hours: 1, cost_usd: 1, max_live_pods: 1, max_depth: 1, max_fan_out: 1}
            acme:
              gpu_hours: -5
              cost_usd: 1
              max_live_pods: 0
              max_depth: 1
              max_fan_out: 1
              deadline: 2027-01-01T00:00:00
              colour: red
          expected_hours: {worker: -1}
          usd_per_gpu_hour: {"a b": 1}
          reconciler: {period_s: 0, alert_onyl: true}
          settlment: {}
        """
    )
    message = fail(text)
    expected = [
        (
            f"gpufabric.yaml:{line_of(text, 'governed_namespaces')}: budget.governed_namespaces[0]: 'Agents' is not a "
            "Kubernetes namespace name"
        ),
        f"gpufabric.yaml:{line_of(text, 'dney')}: budget.unlabeled_pods: 'dney' is not one of: deny, default; "
        "did you mean 'deny'?",
        f"gpufabric.yaml:{line_of(text, 'a/b/c')}: budget.envelopes.a/b/c (key): 'a/b/c' is not \"*\", a client",
        f"gpufabric.yaml:{line_of(text, 'gpu_hours: -5')}: budget.envelopes.acme.gpu_hours: must be at least 0",
        f"gpufabric.yaml:{line_of(text, 'max_live_pods: 0')}: budget.envelopes.acme.max_live_pods: must be at least 1",
        f"gpufabric.yaml:{line_of(text, 'deadline')}: budget.envelopes.acme.deadline: expected a timestamp with a "
        "time zone",
        f"gpufabric.yaml:{line_of(text, 'colour')}: budget.envelopes.acme: unknown key 'colour'",
        f"gpufabric.yaml:{line_of(text, 'worker')}: budget.expected_hours.worker: must be at least 0",
        f"gpufabric.yaml:{line_of(text, 'a b')}: budget.usd_per_gpu_hour.a b (key): 'a b' is not \"*\" or a tier",
        f"gpufabric.yaml:{line_of(text, 'period_s')}: budget.reconciler.period_s: must be greater than 0",
        f"gpufabric.yaml:{line_of(text, 'alert_onyl')}: budget.reconciler: unknown key 'alert_onyl'; did you mean "
        "'alert_only'?",
        f"gpufabric.yaml:{line_of(text, 'settlment')}: budget: unknown key 'settlment'; did you mean 'settlement'?",
    ]
    for needle in expected:
        assert needle in message, f"{needle!r} not in:\n{message}"


def test_duplicate_governed_namespace(fail: Fail) -> None:
    message = fail("version: 1\nbudget:\n  governed_namespaces: [agents, agents]\n")
    assert "gpufabric.yaml:3: budget.governed_namespaces: namespace 'agents' is listed twice" in message
    message = fail("version: 1\nbudget:\n  governed_namespaces: []\n")
    assert "gpufabric.yaml:3: budget.governed_namespaces: must not be empty" in message


def test_simulated_site_carries_a_budget_section() -> None:
    from core.budget import Envelope
    from settings import budget_config_from_settings
    from simulator.up import site_config

    config = budget_config_from_settings(parse_settings(site_config([], "h100-1su")))
    # the simulated site's one default envelope (simulator/up.py), for any client and tier
    assert config.default_envelope("anyone", "standard") == Envelope(Decimal(200), Decimal(600), 250, 3, 60)
    assert config.default_envelope("other", "batch") == config.default_envelope("anyone", "standard")
    assert config.rate("standard") == Decimal(3) and config.alert_only is True
