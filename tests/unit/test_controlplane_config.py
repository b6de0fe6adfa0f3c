"""The simulated plane runs its components as configured for a burst: kube-scheduler's client QPS (a
KubeSchedulerConfiguration file, or its defaults) and Kueue with its release configuration's workers."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from simulator.controlplane.cluster import ControlPlaneError, _scheduler_config


def test_no_qps_keeps_the_schedulers_defaults(tmp_path: Path) -> None:
    assert _scheduler_config(tmp_path, tmp_path / "s.kubeconfig", None) == []
    assert not (tmp_path / "kube-scheduler-config.yaml").exists()


def test_a_qps_is_a_config_file_with_the_kubeconfig_and_no_leader_election(tmp_path: Path) -> None:
    flags = _scheduler_config(tmp_path, tmp_path / "s.kubeconfig", 200)
    path = tmp_path / "kube-scheduler-config.yaml"
    assert flags == [f"--config={path}"]
    config = yaml.safe_load(path.read_text())
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    # with --config the deprecated --kubeconfig and --leader-elect flags are ignored: both must be here
    assert config["clientConnection"] == {"kubeconfig": str(tmp_path / "s.kubeconfig"), "qps": 200, "burst": 400}
    assert config["leaderElection"] == {"leaderElect": False}


@pytest.mark.parametrize("qps", [0, -5, 100_001])
def test_a_qps_out_of_range_is_refused_by_value(tmp_path: Path, qps: int) -> None:
    with pytest.raises(ControlPlaneError, match=f"scheduler_qps must be between 1 and 100000, not {qps}"):
        _scheduler_config(tmp_path, tmp_path / "s.kubeconfig", qps)


# ------------------------------------------------------------------------------------------------ Kueue


def test_kueue_runs_with_the_workers_its_release_configuration_sets(tmp_path: Path) -> None:
    from simulator.controlplane.cluster import KUEUE_RELEASE_CONCURRENCY, _kueue_concurrency, _kueue_config

    sample = tmp_path / "controller_manager_config.sample.yaml"
    sample.write_text("controller:\n  groupKindConcurrency:\n    Pod: 7\n    Job.batch: 3\n")
    assert _kueue_concurrency(sample) == {"Pod": 7, "Job.batch": 3}
    assert _kueue_concurrency(tmp_path / "absent.yaml") == KUEUE_RELEASE_CONCURRENCY
    config = _kueue_config({"kueue-health": 1, "kueue-metrics": 2, "kueue-webhook": 3}, tmp_path, {"Pod": 7})
    assert config["controller"] == {"groupKindConcurrency": {"Pod": 7}}
    sample.write_text("controller:\n  groupKindConcurrency:\n    Pod: 0\n")
    with pytest.raises(ControlPlaneError, match="groupKindConcurrency is missing or not positive counts"):
        _kueue_concurrency(sample)
