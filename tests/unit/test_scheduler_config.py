"""kube-scheduler's client QPS on the simulated plane: a KubeSchedulerConfiguration file, or none."""

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
