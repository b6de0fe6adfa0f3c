"""NVIDIA's ``nvidia-mig-parted``, built from the Go module proxy and cached per user, so tests can
check every config we render with mig-parted's own parser (issue 21).

``nvidia-mig-parted assert --valid-config -f FILE -c NAME`` parses the file with mig-parted's
``api/spec/v1`` types (``yaml.Unmarshal`` into ``v1.Spec``, whose ``UnmarshalJSON`` methods hold
the validation) and checks the named config is present, without touching NVML
(``cmd/nvidia-mig-parted/assert/assert.go``: it returns before ``nvml.New()`` when ``ValidConfig``
is set), so it runs on a machine without a GPU.

Why v0.10.0: the module proxy lists only that version of ``github.com/NVIDIA/mig-parted``
(``go list -m -versions`` and ``@latest`` answer 403 "This module version is not available"), and
``go install …@v0.10.0`` fails on the same 403 while loading the module's deprecation notice; a
wrapper module that requires v0.10.0 and lists the command as a ``tool`` builds in ~40 s with a
warm module cache (cgo is on: go-nvml's dlopen bindings need it). The binary lands in
``${XDG_CACHE_HOME:-~/.cache}/gpufabric/tools/mig-parted-<version>-<arch>/``, as
``simulator/controlplane/build.py`` caches Kubernetes.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MODULE = "github.com/NVIDIA/mig-parted"
VERSION = "v0.10.0"
COMMAND = f"{MODULE}/cmd/nvidia-mig-parted"
BUILD_TIMEOUT_S = 300.0


class MigPartedBuildError(RuntimeError):
    """The binary did not build; the message quotes the tail of Go's output."""


def cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
    return Path(xdg).expanduser() / "gpufabric" / "tools" / f"mig-parted-{VERSION}-{arch}"


def cached() -> Path | None:
    binary = cache_dir() / "nvidia-mig-parted"
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


def build() -> Path:
    """The cached binary, building it first when missing (serialised by a file lock)."""
    if (hit := cached()) is not None:
        return hit
    go = shutil.which("go")
    if go is None:
        raise MigPartedBuildError("the `go` command is not on PATH; nvidia-mig-parted is built from its Go module")
    entry = cache_dir()
    entry.parent.mkdir(parents=True, exist_ok=True)
    with open(entry.parent / f".{entry.name}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (hit := cached()) is not None:
            return hit
        with tempfile.TemporaryDirectory(prefix="gpufabric-mig-parted-") as tmp:
            work = Path(tmp)
            (work / "go.mod").write_text(
                f"module gpufabric.local/tools/migparted\n\ngo 1.24\n\nrequire {MODULE} {VERSION}\n\ntool {COMMAND}\n"
            )
            env = dict(os.environ, GOFLAGS="-mod=mod", GOWORK="off", GOTOOLCHAIN=os.environ.get("GOTOOLCHAIN", "local"))
            staging = entry.with_name(f".{entry.name}-{os.getpid()}")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
            for args in (["mod", "tidy"], ["build", "-trimpath", "-o", str(staging / "nvidia-mig-parted"), COMMAND]):
                try:
                    done = subprocess.run([go, *args], cwd=work, env=env, capture_output=True, text=True,
                                          timeout=BUILD_TIMEOUT_S, check=False)  # fmt: skip
                except subprocess.TimeoutExpired:
                    raise MigPartedBuildError(f"go {' '.join(args[:1])} took over {BUILD_TIMEOUT_S:.0f} s") from None
                if done.returncode != 0:
                    tail = "\n".join((done.stdout + done.stderr).splitlines()[-30:])
                    raise MigPartedBuildError(f"go {' '.join(args)} exited {done.returncode}:\n{tail}")
            shutil.rmtree(entry, ignore_errors=True)
            staging.rename(entry)
    binary = cached()
    if binary is None:
        raise MigPartedBuildError(f"the build finished but {entry}/nvidia-mig-parted is missing")
    return binary


def validate(binary: Path, config_file: Path, name: str) -> tuple[bool, str]:
    """mig-parted's own verdict on config ``name`` of ``config_file``: (valid, its message)."""
    done = subprocess.run(
        [str(binary), "assert", "--valid-config", "-f", str(config_file), "-c", name],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return done.returncode == 0, (done.stdout + done.stderr).strip()


if __name__ == "__main__":
    print(build())
    sys.exit(0)
