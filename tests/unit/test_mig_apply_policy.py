"""Applying MIG plans (issue 21 part 3-4), the pure parts: window labels and the ConfigMap text,
the resources and instances a config gives a node, current layouts read back from labels, the
judge of mig-manager's progress; the twin's layout file reader; the ``mig:`` settings; and every
rendered config checked by NVIDIA's own ``nvidia-mig-parted`` parser."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
from pydantic import ValidationError

from core.mig import apply as mig
from core.mig.demand import Gpu, SliceRequest, TenantDemand
from core.mig.layout import layout_space
from core.mig.migparted import MigConfigError, load_config, render_plan
from core.mig.planner import plan
from core.mig.profiles import MODELS
from simulator import migparted
from simulator.dcgm.exposition import load_mig_layouts

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures"

CONFIG = """version: v1
mig-configs:
  mixed:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
    - devices: [2]
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2
    - devices: [3, 4, 5, 6, 7]
      mig-enabled: false
  all-2g:
    - devices: all
      mig-enabled: true
      mig-devices:
        "2g.20gb": 3
  all-off:
    - devices: all
      mig-enabled: false
"""


def gpus(nodes: int, model: str = "H100-80GB", per_node: int = 8) -> list[Gpu]:
    return [Gpu(f"n{n}/{i}", f"n{n}", i, model) for n in range(nodes) for i in range(per_node)]


DEMANDS = (
    TenantDemand("regulated", "dedicated", (SliceRequest("H100-80GB", 2, profile="3g.40gb"),)),
    TenantDemand("inference", "mig", (SliceRequest("H100-80GB", 14, profile="1g.10gb"),)),
    TenantDemand("research", "shared", (SliceRequest("H100-80GB", 4, memory_gib=16, compute_slices=2),)),
)


# ------------------------------------------------------------------------------ resources, instances


def test_mig_resources_follow_the_named_config_mixed_strategy() -> None:
    config = load_config(CONFIG)
    assert mig.mig_resources(config, "mixed", 8) == {
        "nvidia.com/gpu": "5", "nvidia.com/mig-1g.10gb": "14", "nvidia.com/mig-3g.40gb": "2",
    }  # fmt: skip
    assert mig.mig_resources(config, "all-2g", 4) == {"nvidia.com/gpu": "0", "nvidia.com/mig-2g.20gb": "12"}
    assert mig.mig_resources(config, "all-off", 8) == {"nvidia.com/gpu": "8"}
    # a device index past the node's GPUs is ignored, as mig-parted skips devices it cannot find
    assert mig.mig_resources(config, "mixed", 1) == {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "7"}
    with pytest.raises(KeyError, match="nope"):
        mig.mig_resources(config, "nope", 8)


def test_instances_are_a_valid_placement_numbered_in_order() -> None:
    config = load_config(CONFIG)
    found = mig.instances(config, "mixed", 8, "NVIDIA-H100-80GB-HBM3")
    assert sorted(found) == [0, 1, 2]
    assert found[0] == [("1g.10gb", i) for i in range(1, 8)]
    assert found[2] == [("3g.40gb", 1), ("3g.40gb", 2)]


# ------------------------------------------------------------------------------------ current layouts


def test_current_gpus_read_layouts_only_where_mig_manager_reported_success() -> None:
    config = load_config(CONFIG)
    h100 = {mig.GFD_PRODUCT: "NVIDIA-H100-80GB-HBM3", mig.GFD_COUNT: "8"}
    nodes = {
        "done": {**h100, mig.MIG_CONFIG_LABEL: "mixed", mig.MIG_STATE_LABEL: "success"},
        "pending": {**h100, mig.MIG_CONFIG_LABEL: "mixed", mig.MIG_STATE_LABEL: "pending"},
        "unknown": {**h100, mig.MIG_CONFIG_LABEL: "gone", mig.MIG_STATE_LABEL: "success"},
        "cpu": {"kubernetes.io/os": "linux"},
        "bad-count": {mig.GFD_PRODUCT: "NVIDIA-H100-80GB-HBM3", mig.GFD_COUNT: "eight"},
        "t4": {mig.GFD_PRODUCT: "Tesla-T4", mig.GFD_COUNT: "1"},
    }
    found, notes = mig.current_gpus(nodes, config, frozenset({"pending"}))
    by_node = Counter(g.node for g in found)
    assert by_node == {"done": 8, "pending": 8, "unknown": 8}
    done = {g.index: g.layout for g in found if g.node == "done"}
    assert Counter(p.profile for p in done[0] or ()) == {"1g.10gb": 7}
    assert Counter(p.profile for p in done[2] or ()) == {"3g.40gb": 2}
    assert done[3] is None
    assert all(g.layout is None for g in found if g.node in ("pending", "unknown"))
    assert all(g.training for g in found if g.node == "pending")
    text = "\n".join(notes)
    assert "unknown: nvidia.com/mig.config=gone is in no config" in text
    assert "bad-count" in text and "Tesla-T4 is not a modelled MIG GPU" in text


# --------------------------------------------------------------------------------------- windows


def test_window_labels_change_only_the_first_windows_nodes_and_keep_every_named_config() -> None:
    inventory = gpus(6)
    result = plan(inventory, DEMANDS, max_per_window=2, windows=4)
    assert result.complete and len(result.windows) >= 2
    window = mig.window_labels(result, {"n5": "gpufabric-old"}, old_text=None)
    first_nodes = {g.split("/")[0] for g in result.windows[0]}
    assert set(window.window_nodes) == first_nodes
    assert set(window.labels) == first_nodes | {"n5"}
    assert window.labels["n5"] == {mig.MIG_CONFIG_LABEL: "gpufabric-old"}  # another node's label kept
    config = load_config(window.config_text)
    for node in first_nodes:
        name = window.labels[node][mig.MIG_CONFIG_LABEL]
        assert name in config.configs
        assert window.previous[node] in config.configs  # the rollback target is held too
        # the before-config is MIG disabled on these fresh GPUs
        assert mig.mig_resources(config, window.previous[node], 8) == {"nvidia.com/gpu": "8"}
    assert window.previous["n5"] == "gpufabric-old"


def test_merge_keeps_only_the_old_configs_still_named() -> None:
    new = "version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n"
    merged = mig.merge_configs(new, CONFIG, ["mixed", "a"])
    assert sorted(load_config(merged).configs) == ["a", "mixed"]
    assert mig.mig_resources(load_config(merged), "mixed", 8)["nvidia.com/mig-1g.10gb"] == "14"
    # an unreadable old ConfigMap is replaced, not merged, and never breaks the new text
    assert sorted(load_config(mig.merge_configs(new, "version: v9\n", ["mixed"])).configs) == ["a"]
    with pytest.raises(MigConfigError, match="unknown version"):
        mig.merge_configs("version: v2\nmig-configs: {}\n", None, [])


def test_configmap_object_refuses_a_config_mig_parted_would_refuse() -> None:
    ref = mig.ConfigMapRef()
    obj = mig.configmap_object(CONFIG, ref, "gpufabric-mig")
    assert (obj["metadata"]["namespace"], obj["metadata"]["name"]) == ("gpu-operator", "custom-mig-config")
    assert obj["data"] == {"config.yaml": CONFIG}
    with pytest.raises(MigConfigError, match="count -1 is not a non-negative integer"):
        mig.configmap_object(CONFIG.replace('"1g.10gb": 7', '"1g.10gb": -1'), ref, "m")


# ----------------------------------------------------------------------------------------- judge


def test_judge_success_failed_stuck_and_relabelled() -> None:
    wanted = {"a": "c1", "b": "c1", "c": "c1", "d": "c1", "e": "c1"}
    seen = {
        "a": {mig.MIG_CONFIG_LABEL: "c1", mig.MIG_STATE_LABEL: "success"},
        "b": {mig.MIG_CONFIG_LABEL: "c1", mig.MIG_STATE_LABEL: "failed"},
        "c": {mig.MIG_CONFIG_LABEL: "c1", mig.MIG_STATE_LABEL: "rebooting"},
        "d": {mig.MIG_CONFIG_LABEL: "other", mig.MIG_STATE_LABEL: "success"},
    }
    early = mig.judge(wanted, seen, 10, 60)
    assert early.done == ("a",) and early.waiting == ("c",) and not early.finished
    assert [(f.node, f.kind) for f in early.findings] == [("b", "failed"), ("d", "label_lost"), ("e", "label_lost")]
    late = mig.judge(wanted, seen, 60, 60)
    assert late.finished and not late.ok
    assert ("c", "stuck") in [(f.node, f.kind) for f in late.findings]
    assert "rebooting after 60 s" in str(next(f for f in late.findings if f.node == "c"))
    # a success left over from before the relabel is not this window's success
    stale = mig.judge({"a": "c1"}, seen, 1, 60, stale_success=frozenset({"a"}))
    assert stale.waiting == ("a",) and not stale.done
    assert mig.judge({"a": "c1"}, seen, 1, 60).ok


# ------------------------------------------------------------------------------ twin's layout file


def test_layout_file_reader(tmp_path: Path) -> None:
    path = tmp_path / "mig-layouts.json"
    assert load_mig_layouts(path) == {}
    path.write_text('{"n0": {"0": [["1g.10gb", 1], ["3g.40gb", 2]]}}')
    assert load_mig_layouts(path) == {"n0": {0: (("1g.10gb", 1), ("3g.40gb", 2))}}
    for bad, why in (
        ('{"n0": {"0": [["1g.10gb"]]}}', "is not \\[profile, id\\]"),
        ('{"n0": {"x": []}}', "expected a list of instances"),
        ('{"n0": []}', "expected an object of GPUs"),
        ("[1]", "expected an object of nodes"),
        ('{"n0": {"0": [["1g.10gb", 1]]', "not JSON"),
        ('{"n0": {"0": [["1g.10gb", true]]}}', "is not \\[profile, id\\]"),
        ("\x00\x00", "not JSON"),
    ):
        path.write_text(bad)
        with pytest.raises(ValueError, match=why):
            load_mig_layouts(path)
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match="not JSON"):
        load_mig_layouts(path)


# -------------------------------------------------------------------------------------- settings


def test_mig_settings_defaults_and_refusals() -> None:
    from settings.models import MigSettings, Settings

    s = Settings(version=1)
    assert s.mig.config_namespace == "gpu-operator" and s.mig.field_manager == "gpufabric-mig"
    assert {t.isolation for t in s.mig.tenants} == {"dedicated", "mig", "shared"}
    with pytest.raises(ValidationError, match="tenant\\(s\\) listed twice: a"):
        MigSettings.model_validate({"tenants": [{"tenant": "a"}, {"tenant": "a"}]})
    with pytest.raises(ValidationError, match="config_prefix"):
        MigSettings.model_validate({"config_prefix": "Not_A_Label"})
    with pytest.raises(ValidationError, match="isolation"):
        MigSettings.model_validate({"tenants": [{"tenant": "a", "isolation": "sometimes"}]})


# ------------------------------------------------------------------------- mig-parted's own parser


@pytest.fixture(scope="module")
def mig_parted() -> Path:
    """NVIDIA's nvidia-mig-parted v0.10.0, built from the Go module proxy once per machine."""
    return migparted.build()


def _random_demands(rng: random.Random, model: str) -> list[TenantDemand]:
    profiles = [p.name for p in next(m for m in MODELS if m.name == model).profiles]
    out = []
    for t in range(rng.randint(1, 4)):
        isolation = rng.choice(["dedicated", "mig", "shared"])
        reqs = tuple(SliceRequest(model, rng.randint(1, 6), profile=rng.choice(profiles)) for _ in range(2))
        out.append(TenantDemand(f"t{t}", isolation, reqs))
    return out


def test_every_rendered_config_passes_mig_parted(tmp_path: Path, mig_parted: Path) -> None:
    rng = random.Random(21)
    checked = 0
    for model in MODELS:
        inventory = gpus(4, model.name)
        # current layouts on half the GPUs, so windows, before-configs and merges all show up
        space = layout_space(model)
        maximal = space.maximal_counts
        current = [
            Gpu(g.id, g.node, g.index, g.model,
                space.placement(maximal[rng.randrange(len(maximal))]) if g.index % 2 else None)
            for g in inventory
        ]  # fmt: skip
        result = plan(current, _random_demands(rng, model.name), max_per_window=4, windows=8)
        texts = [render_plan(result).text]
        if result.windows:
            texts.append(mig.window_labels(result, {}).config_text)
        for i, text in enumerate(texts):
            path = tmp_path / f"{model.name}-{i}.yaml"
            path.write_text(text)
            for name in load_config(text).configs:
                ok, message = migparted.validate(mig_parted, path, name)
                assert ok, f"{model.name} {name}: {message}\n{text}"
                checked += 1
    assert checked >= len(MODELS) * 2


def test_mig_parted_agrees_with_our_loader_on_fixtures_and_broken_files(tmp_path: Path, mig_parted: Path) -> None:
    for fixture in ("examples__config.yaml", "examples__dgx-station-80gb-config.yaml"):
        path = FIXTURES / "mig" / fixture
        for name in load_config(path.read_text()).configs:
            ok, message = migparted.validate(mig_parted, path, name)
            assert ok, f"{fixture} {name}: {message}"
    # config-default.yaml is newer than v0.10.0 (the one version the proxy serves): its "-me"
    # profile suffix (1g.24gb-me, GB200) is a format v0.10.0's parser does not know yet. Our
    # loader takes it (go-nvlib's newer format); our renderer never writes it.
    newer = FIXTURES / "mig" / "deployments__systemd__config-default.yaml"
    ok, message = migparted.validate(mig_parted, newer, "all-disabled")
    assert not ok and "invalid format for '1g.24gb-me'" in message
    assert "all-disabled" in load_config(newer.read_text()).configs
    for broken, ours in (
        (CONFIG.replace('"1g.10gb": 7', '"1g.10gb": -1'), "not a non-negative integer"),
        (CONFIG.replace("mig-enabled: false", "mig-enabled: false\n      mig-devices: {\"1g.10gb\": 1}", 1),
         "MIG devices listed while 'mig-enabled' is false"),
        (CONFIG.replace("version: v1", "version: v2"), "unknown version"),
        (CONFIG.replace("devices: all", "devices: some", 1), "the only string allowed is 'all'"),
    ):  # fmt: skip
        path = tmp_path / "broken.yaml"
        path.write_text(broken)
        ok, message = migparted.validate(mig_parted, path, "mixed")
        assert not ok, broken
        with pytest.raises(MigConfigError, match=ours):
            load_config(broken)
