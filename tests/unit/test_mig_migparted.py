"""mig-parted configs: NVIDIA's own configs (fixtures) load and validate under our rules, hostile
configs are refused with the reason, and a rendered plan reads back as the same layouts.

What the fixture check found (also in docs/mig.md): no entry that applies to a modelled GPU breaks
our placement rules. Entries for parts we do not model (A30, B200/B300, GB200/GB300, GH200, H100
96GB, RTX PRO, the DGX Station's display GPU) are reported ``unmodelled`` and named below.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.mig.demand import Gpu, SliceRequest, TenantDemand
from core.mig.layout import Placement, layout_space
from core.mig.migparted import (
    LABEL_VALUE_RE,
    MigConfigError,
    check_config,
    load_config,
    render,
    render_plan,
)
from core.mig.planner import plan
from core.mig.profiles import MODELS

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "mig"


def _fixture_configs() -> dict[str, str]:
    plain = (
        "examples__config.yaml",
        "examples__dgx-station-80gb-config.yaml",
        "deployments__systemd__config-default.yaml",
    )
    texts = {name: (FIXTURES / name).read_text() for name in plain}
    for name in (
        "deployments__container__nvidia-mig-manager-example.yaml",
        "deployments__container__nvidia-mig-manager-example-hopper-blackwell.yaml",
    ):
        maps = [d for d in yaml.safe_load_all((FIXTURES / name).read_text()) if d and d.get("kind") == "ConfigMap"]
        (text,) = [d["data"]["config.yaml"] for d in maps if "config.yaml" in d.get("data", {})]
        texts[name] = text
    return texts


CONFIGS = _fixture_configs()
EXPECTED = {  # file: (named configs, valid, disabled, unmodelled entries)
    "examples__config.yaml": (9, 11, 2, 0),
    "examples__dgx-station-80gb-config.yaml": (9, 10, 11, 0),
    "deployments__systemd__config-default.yaml": (81, 33, 1, 60),
    "deployments__container__nvidia-mig-manager-example.yaml": (24, 18, 1, 9),
    "deployments__container__nvidia-mig-manager-example-hopper-blackwell.yaml": (50, 22, 1, 34),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_nvidia_configs_load_and_validate_under_our_rules(name: str) -> None:
    config = load_config(CONFIGS[name])
    checks = check_config(config)
    status = Counter(c.status for c in checks)
    assert (len(config.configs), status["valid"], status["disabled"], status["unmodelled"]) == EXPECTED[name]
    assert status["invalid"] == 0, [c for c in checks if c.status == "invalid"]
    for check in checks:
        if check.status == "unmodelled":  # never a profile set a modelled GPU offers in full
            assert "names no modelled GPU" in check.detail or "no modelled GPU offers all of" in check.detail


def test_specific_fixture_entries() -> None:
    station = {c.path: c for c in check_config(load_config(CONFIGS["examples__dgx-station-80gb-config.yaml"]))}
    dev = station["mig-configs.balanced-k8s-dgx-station-80[2]"]  # "2g.20gb": 3 + "1g.10gb": 1, filtered to A100-80GB
    assert (dev.status, dev.models) == ("valid", ("A100-80GB",))
    display = station["mig-configs.balanced-k8s-dgx-station-80[4]"]
    assert display.status == "disabled"
    default = {c.path: c for c in check_config(load_config(CONFIGS["deployments__systemd__config-default.yaml"]))}
    a100_40 = default["mig-configs.all-1g.10gb[1]"]  # 1g.10gb x 4: two memory slices each on the 40GB part
    assert (a100_40.status, a100_40.models) == ("valid", ("A100-40GB",))
    assert default["mig-configs.all-1g.6gb[0]"].status == "unmodelled"  # A30
    assert default["mig-configs.all-1g.23gb[0]"].detail == "no modelled GPU offers all of 1g.23gb"  # B200
    balanced = [c for c in default.values() if c.config == "all-balanced" and c.status == "valid"]
    assert sorted(m for c in balanced for m in c.models) == [
        "A100-40GB",
        "A100-80GB",
        "H100-80GB",
        "H100-94GB",
        "H200-141GB",
    ]


BROKEN_LAYOUTS = [
    ('"1g.20gb": 5', "5 x 1g.20gb, at most 4"),
    ('"4g.40gb": 1\n        "3g.40gb": 2', "10 compute slices, H100-80GB has 7"),
    ('"1g.20gb": 3\n        "2g.20gb": 2', "10 memory slices, H100-80GB has 8"),
    ('"1g.10gb+me": 2', "2 x 1g.10gb+me, at most 1"),
]


@pytest.mark.parametrize(("devices", "why"), BROKEN_LAYOUTS)
def test_layouts_that_break_the_rules_are_reported_invalid(devices: str, why: str) -> None:
    text = f"""version: v1
mig-configs:
  bad:
    - device-filter: ["0x233010DE"]
      devices: all
      mig-enabled: true
      mig-devices:
        {devices}
"""
    (check,) = check_config(load_config(text))
    assert check.status == "invalid" and check.models == ("H100-80GB",)
    assert check.detail == f"H100-80GB: {why}"


def test_a_profile_the_filtered_gpu_lacks_is_invalid() -> None:
    text = (
        'version: v1\nmig-configs:\n  x:\n    - device-filter: "0x233010DE"\n      devices: [0]\n'
        '      mig-enabled: true\n      mig-devices: {"1g.5gb": 1}\n'
    )
    (check,) = check_config(load_config(text))
    assert (check.status, check.detail) == ("invalid", "H100-80GB offer(s) no 1g.5gb")


def _entry(body: str) -> str:
    return "version: v1\nmig-configs:\n  c:\n    - " + body.replace("\n", "\n      ") + "\n"


HOSTILE = [
    ("dup key", "version: v1\nversion: v1\nmig-configs: {}\n", "line 2: key 'version' given twice"),
    ("no version", "mig-configs:\n  c: []\n", "missing 'version' field"),
    ("v2", "version: v2\nmig-configs:\n  c: []\n", "unknown version 'v2'"),
    ("extra top", "version: v1\nhooks: {}\nmig-configs: {}\n", "unexpected field 'hooks'"),
    ("no configs", "version: v1\n", "'mig-configs' must be a mapping with at least one entry"),
    ("empty list", "version: v1\nmig-configs:\n  c: []\n", "mig-configs.c: must be a list with at least one entry"),
    ("list top", "- 1\n", "the top level must be a mapping, not list"),
    ("not yaml", "version: [v1\n", "not YAML"),
    (
        "extra field",
        _entry("devices: all\nmig-enabled: false\nreboot: true"),
        "mig-configs.c[0]: unexpected field 'reboot'",
    ),
    ("no devices", _entry("mig-enabled: false"), "missing required field 'devices'"),
    ("devices word", _entry("devices: some\nmig-enabled: false"), "the only string allowed is 'all', not 'some'"),
    ("devices int", _entry("devices: 3\nmig-enabled: false"), "'all' or a list of device indices, not 3"),
    ("devices neg", _entry("devices: [-1]\nmig-enabled: false"), "'all' or a list of device indices"),
    ("enabled word", _entry("devices: all\nmig-enabled: yes please"), "mig-enabled: true or false"),
    ("filter int", _entry("device-filter: 42\ndevices: all\nmig-enabled: false"), "a string or a list of strings"),
    (
        "bad profile",
        _entry('devices: all\nmig-enabled: true\nmig-devices: {"big": 1}'),
        "'big' is not a MIG profile name",
    ),
    (
        "neg count",
        _entry('devices: all\nmig-enabled: true\nmig-devices: {"1g.10gb": -1}'),
        "is not a non-negative integer",
    ),
    (
        "bool count",
        _entry('devices: all\nmig-enabled: true\nmig-devices: {"1g.10gb": true}'),
        "is not a non-negative integer",
    ),
    ("all zero", _entry('devices: all\nmig-enabled: true\nmig-devices: {"1g.10gb": 0}'), "all counts are 0"),
    ("enabled bare", _entry("devices: all\nmig-enabled: true"), "'mig-devices' is required when 'mig-enabled' is true"),
    (
        "disabled with",
        _entry('devices: all\nmig-enabled: false\nmig-devices: {"1g.10gb": 1}'),
        "MIG devices listed while 'mig-enabled' is false",
    ),
    ("huge", "#" * (5 << 20), "over the 4,194,304 a mig-parted config can be"),
    ("deep", "[" * 5000 + "]" * 5000, "nested too deeply"),
    ("tagged", "version: !!python/object:os.system v1\n", "not YAML"),
]


@pytest.mark.parametrize(("text", "message"), [(t, m) for _, t, m in HOSTILE], ids=[n for n, _, _ in HOSTILE])
def test_hostile_configs_are_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(MigConfigError, match=re.escape(message)):
        load_config(text)


def test_alias_expansion_cannot_blow_up() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + k)}: &{chr(98 + k)} [*{chr(97 + k)}, *{chr(97 + k)}, *{chr(97 + k)}, *{chr(97 + k)}]\n"
        for k in range(20)
    )
    with pytest.raises(MigConfigError, match="missing 'version' field"):
        load_config(bomb)


# --- rendering ---------------------------------------------------------------------------------


def _plan_for_render():
    h100, h200 = "H100-80GB", "H200-141GB"
    gpus = [Gpu(f"a{i}", "node-a", i, h100) for i in range(8)]
    gpus += [Gpu(f"b{i}", "node-b", i, h100) for i in range(8)]
    gpus += [Gpu(f"c{i}", "node-c", i, h200, training=(i == 0)) for i in range(4)]
    demands = [
        TenantDemand(
            "acme", "mig", (SliceRequest(h100, 16, profile="3g.40gb"), SliceRequest(h200, 3, profile="2g.35gb"))
        ),
        TenantDemand("bank", "dedicated", (SliceRequest(h100, 2, profile="1g.10gb+me"),)),
        TenantDemand("whole", "mig", (SliceRequest(h100, 2, whole_gpu=True),)),
    ]
    return plan(gpus, demands, max_per_window=20)


def test_a_rendered_plan_reads_back_as_the_planned_layouts() -> None:
    result = _plan_for_render()
    assert result.complete
    rendered = render_plan(result)
    config = load_config(rendered.text)
    assert set(config.configs) == set(rendered.node_config.values())
    for name in config.configs:
        assert len(name) <= 63 and LABEL_VALUE_RE.match(name)
    for check in check_config(config):
        assert check.status in ("valid", "disabled"), check
    for p in result.gpus:
        entries = config.configs[rendered.node_config[p.gpu.node]]
        (entry,) = [e for e in entries if isinstance(e.devices, tuple) and p.gpu.index in e.devices]
        assert entry.mig_enabled == p.mig_enabled
        assert entry.counts() == dict(Counter(a.placement.profile for a in p.instances))
    # every GPU of a node appears exactly once in its config
    for node, name in rendered.node_config.items():
        indices = [i for e in config.configs[name] for i in e.devices]  # type: ignore[union-attr]
        assert sorted(indices) == sorted(p.gpu.index for p in result.gpus if p.gpu.node == node)
    # node-c: the training GPU (0) and the unused ones as they are, acme's three 2g.35gb on GPU 1
    assert rendered.descriptions[rendered.node_config["node-c"]] == "GPU 0,2,3: no MIG; GPU 1: MIG 3x2g.35gb"


def test_node_layouts_share_a_name_exactly_when_they_are_equal() -> None:
    same = {"n1": [(0, True, {"3g.40gb": 2})], "n2": [(0, True, {"3g.40gb": 2})], "n3": [(0, True, {"7g.80gb": 1})]}
    rendered = render(same)
    assert rendered.node_config["n1"] == rendered.node_config["n2"] != rendered.node_config["n3"]
    assert render(same, prefix="site-a").node_config["n1"].startswith("site-a-")
    assert render(same).node_config == rendered.node_config  # stable from run to run
    with pytest.raises(ValueError, match="must be a label value of at most 50 characters"):
        render(same, prefix="bad prefix")
    with pytest.raises(ValueError, match="lists device index 0 twice"):
        render({"n": [(0, True, {}), (0, False, {})]})
    with pytest.raises(ValueError, match="instances listed with MIG disabled"):
        render({"n": [(0, False, {"1g.10gb": 1})]})


def test_render_after_no_window_is_the_current_state() -> None:
    sevens = tuple(Placement("1g.10gb", k) for k in range(7))
    gpus = [Gpu("g0", "n", 0, "H100-80GB", sevens), Gpu("g1", "n", 1, "H100-80GB")]
    result = plan(
        gpus, [TenantDemand("a", "mig", (SliceRequest("H100-80GB", 2, profile="3g.40gb"),))], max_per_window=1
    )
    before = load_config(render_plan(result, through_window=0).text)
    after = load_config(render_plan(result).text)
    (b,) = before.configs.values()
    (a,) = after.configs.values()
    assert {e.devices: e.counts() for e in b} == {(0,): {"1g.10gb": 7}, (1,): {}}
    assert [e.mig_enabled for e in b if e.devices == (1,)] == [False]
    assert {e.devices: e.counts() for e in a} == {(0,): {"1g.10gb": 7}, (1,): {"3g.40gb": 2}}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=st.sampled_from(MODELS),
    picks=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 7), st.integers(0, 10_000)), min_size=1, max_size=24),
)
def test_any_node_layouts_render_to_a_config_mig_parted_accepts(model, picks: list[tuple[int, int, int]]) -> None:
    layouts = layout_space(model).layouts
    nodes: dict[str, dict[int, tuple[int, bool, dict[str, int]]]] = {}
    for node, index, k in picks:
        layout = layouts[k % len(layouts)]
        counts = dict(Counter(p.profile for p in layout))
        nodes.setdefault(f"node-{node}", {})[index] = (index, bool(k % 5), counts if k % 5 else {})
    rendered = render({n: list(v.values()) for n, v in nodes.items()})
    config = load_config(rendered.text)
    for check in check_config(config):
        assert check.status in ("valid", "disabled"), check
        if check.status == "valid":
            assert model.name in check.models
