"""Build the real control plane's binaries from the Go module proxy, pinned and cached per user.

Why a build of our own: tests that talk to a Kubernetes API are only as right as the API server
they talk to. The binaries come from source (the Go module proxy is the one place this machine and
CI can fetch code from), at the versions pinned in ``versions.env``, and land in a per-user cache
keyed by those versions, the way setup-envtest keeps ``~/.local/share/kubebuilder-envtest``: the
first build takes a while, every later one (and every fresh clone on the same machine) is a
directory lookup.

Three Go wrapper modules, generated from ``versions.env`` into a temporary directory:

- **kubernetes** requires ``k8s.io/kubernetes`` and replaces every staging module (``k8s.io/api``,
  ``k8s.io/client-go``, ...) with its published release. ``k8s.io/kubernetes`` cannot be
  ``go install``-ed: its go.mod points the staging modules at ``./staging/src/...`` and a
  dependency's replaces are ignored, so its ``v0.0.0`` requirements would not resolve.
- **etcd** requires ``go.etcd.io/etcd/server/v3`` (whose root package is etcd's ``main``); it has
  the same kind of local replaces, and its sibling modules are published at the same version.
- **kueue** requires ``sigs.k8s.io/kueue`` for ``cmd/kueue``.

Each wrapper lists its commands as ``tool`` directives (Go 1.24+), so ``go mod tidy`` resolves the
exact build list and checks every module against the checksum database.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

VERSIONS_FILE = Path(__file__).with_name("versions.env")

# Bump when the way we build changes (flags, ldflags, layout) so old cache entries are not reused.
BUILD_RECIPE = "3"

Progress = Callable[[str], None]


class BuildError(RuntimeError):
    """A binary did not build; the message quotes the tail of the Go output."""


@dataclass(frozen=True)
class Versions:
    """The pinned versions, read from ``versions.env`` (KEY=VALUE lines, ``#`` comments)."""

    kubernetes: str
    kubernetes_staging: str
    kueue: str
    etcd: str
    gotoolchain: str = "local"
    cert_manager: str = ""  # CRDs only, cached apart (see :func:`cert_manager_crds`)

    @classmethod
    def load(cls, path: Path = VERSIONS_FILE) -> Versions:
        values: dict[str, str] = {}
        for lineno, raw in enumerate(path.read_text().splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise ValueError(f"{path}:{lineno}: expected KEY=VALUE, got {raw!r}")
            values[key.strip()] = value.strip()
        try:
            return cls(
                kubernetes=values["KUBERNETES_VERSION"],
                kubernetes_staging=values["KUBERNETES_STAGING_VERSION"],
                kueue=values["KUEUE_VERSION"],
                etcd=values["ETCD_VERSION"],
                gotoolchain=values.get("GOTOOLCHAIN", "local") or "local",
                cert_manager=values.get("CERT_MANAGER_VERSION", ""),
            )
        except KeyError as exc:
            raise ValueError(f"{path}: missing {exc.args[0]}") from None

    @property
    def cache_key(self) -> str:
        """Directory name of this version set's cache entry: readable, plus a hash of everything."""
        built = {k: v for k, v in asdict(self).items() if k != "cert_manager"}  # CRDs are not built
        blob = json.dumps({**built, "recipe": BUILD_RECIPE, "goarch": _goarch()}, sort_keys=True)
        digest = hashlib.sha256(blob.encode()).hexdigest()[:10]
        return f"k8s-{self.kubernetes}_etcd-{self.etcd}_kueue-{self.kueue}_{digest}"


@dataclass(frozen=True)
class Binaries:
    """One cache entry: the binaries and the Kueue manifests of the pinned release."""

    root: Path
    versions: Versions
    cache_hit: bool = field(default=False, compare=False)

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    def binary(self, name: str) -> Path:
        return self.bin_dir / name

    @property
    def etcd(self) -> Path:
        return self.binary("etcd")

    @property
    def kube_apiserver(self) -> Path:
        return self.binary("kube-apiserver")

    @property
    def kube_controller_manager(self) -> Path:
        return self.binary("kube-controller-manager")

    @property
    def kube_scheduler(self) -> Path:
        return self.binary("kube-scheduler")

    @property
    def kubectl(self) -> Path:
        return self.binary("kubectl")

    @property
    def kueue(self) -> Path:
        return self.binary("kueue")

    @property
    def kueue_crd_dir(self) -> Path:
        """The release's CRDs (``config/components/crd/bases/*.yaml`` of the Kueue module)."""
        return self.root / "kueue" / "crd"

    @property
    def kueue_config_sample(self) -> Path:
        """The release's own manager configuration (``config/components/manager/controller_manager_config.yaml``)."""
        return self.root / "kueue" / "controller_manager_config.sample.yaml"

    @property
    def kueue_webhook_manifest(self) -> Path:
        """The release's webhook configurations (``config/components/webhook/manifests.yaml``)."""
        return self.root / "kueue" / "webhook" / "manifests.yaml"


BINARY_NAMES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kueue")
_KUBE_CMDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")


def cache_root() -> Path:
    """``$GPUFABRIC_KUBE_CACHE``, else ``${XDG_CACHE_HOME:-~/.cache}/gpufabric/kube``."""
    explicit = os.environ.get("GPUFABRIC_KUBE_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "gpufabric" / "kube"


def cached(versions: Versions | None = None) -> Binaries | None:
    """The cache entry for ``versions`` if it is complete, without building anything."""
    versions = versions or Versions.load()
    entry = cache_root() / versions.cache_key
    manifest = entry / "manifest.json"
    if not manifest.is_file():
        return None
    binaries = Binaries(entry, versions, cache_hit=True)
    if not all(binaries.binary(n).is_file() for n in BINARY_NAMES) or not binaries.kueue_webhook_manifest.is_file():
        return None
    return binaries


def build(versions: Versions | None = None, *, progress: Progress | None = None, force: bool = False) -> Binaries:
    """Return the cache entry for ``versions``, building it first if it is missing.

    Serialised by a per-entry file lock: a second concurrent caller waits, then finds the entry
    the first one wrote. The entry is built in a temporary directory beside it and renamed into
    place only when complete, so a killed build never leaves a half entry that looks whole.
    """
    say = progress or _print
    versions = versions or Versions.load()
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    if not force and (hit := cached(versions)) is not None:
        return hit
    with _locked(root / f".{versions.cache_key}.lock", say):
        if not force and (hit := cached(versions)) is not None:
            return hit
        return _build_locked(versions, root, say)


CERT_MANAGER_MODULE = "github.com/cert-manager/cert-manager"


def cert_manager_crds(versions: Versions | None = None, *, progress: Progress | None = None) -> Path:
    """The directory of cert-manager's CRDs at the pinned version, fetched once per machine.

    ``deploy/`` ships cert-manager Certificates and an Issuer; a server-side dry run of them needs
    their CRDs installed. The module zip (about 4 MB) carries them as plain YAML in
    ``deploy/crds``; nothing is compiled. Same locking and rename-into-place as :func:`build`.
    """
    say = progress or _print
    versions = versions or Versions.load()
    if not versions.cert_manager:
        raise BuildError(f"{VERSIONS_FILE}: CERT_MANAGER_VERSION is not set")
    root = cache_root()
    entry = root / f"cert-manager-{versions.cert_manager}" / "crds"
    if any(entry.glob("*.yaml")):
        return entry
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f".cert-manager-{versions.cert_manager}.lock", say):
        if any(entry.glob("*.yaml")):
            return entry
        say(f"controlplane: fetching cert-manager {versions.cert_manager} CRDs from the Go module proxy")
        with tempfile.TemporaryDirectory(prefix="gpufabric-cert-manager-") as tmp:
            work = Path(tmp)
            info = _download(CERT_MANAGER_MODULE, versions.cert_manager, work, _go_env(versions), work / "go.log", say)
            crds = sorted((Path(info["Dir"]) / "deploy" / "crds").glob("*.yaml"))
            if not crds:
                raise BuildError(f"no CRDs under {info['Dir']}/deploy/crds")
            staging = entry.parent / f".crds-{os.getpid()}"
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
            for crd in crds:
                shutil.copyfile(crd, staging / crd.name)
            staging.rename(entry)
        return entry


# --------------------------------------------------------------------------------------------- internals


def _print(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _goarch() -> str:
    machine = os.uname().machine
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


@contextlib.contextmanager
def _locked(path: Path, say: Progress) -> Iterator[None]:
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"controlplane: another build holds {path}; waiting for it")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError("the `go` command is not on PATH; the control plane is built from Go modules")
    return go


def _go_env(versions: Versions) -> dict[str, str]:
    env = dict(os.environ)
    # GOMODCACHE and GOCACHE stay Go's defaults (`go env GOMODCACHE GOCACHE`), shared with every other
    # Go build on the machine; only the finished binaries live in our cache.
    env.update(
        {
            "GOTOOLCHAIN": versions.gotoolchain,
            "GOFLAGS": "-mod=mod",  # the wrapper modules are generated: let go record their go.sum
            "GOWORK": "off",
            "CGO_ENABLED": "0",  # static binaries, as Kubernetes releases them; no C toolchain needed
        }
    )
    return env


def _run_go(args: list[str], cwd: Path, env: dict[str, str], log: Path, say: Progress, label: str) -> None:
    """Run one go command niced, appending to ``log``, with a heartbeat line every 30 s."""
    started = time.monotonic()
    with open(log, "ab") as out:
        out.write(f"\n$ go {' '.join(args)}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            ["nice", "-n", "10", _go(), *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        while True:
            try:
                rc = proc.wait(timeout=30)
                break
            except subprocess.TimeoutExpired:
                say(f"  ... {label}: {_fmt(time.monotonic() - started)} elapsed")
            except BaseException:
                proc.kill()
                proc.wait()
                raise
    if rc != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise BuildError(f"{label}: `go {' '.join(args[:2])} ...` exited {rc}; log {log}:\n{tail}")


def _fmt(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _download(module: str, version: str, cwd: Path, env: dict[str, str], log: Path, say: Progress) -> dict[str, str]:
    """``go mod download -json`` one module; returns Go's description (Dir, GoMod, Info, ...)."""
    out = cwd / f"download-{module.replace('/', '_')}.json"
    _run_go(["mod", "download", "-json", f"{module}@{version}"], cwd, env, out, say, f"download {module}@{version}")
    text = out.read_text()
    data: dict[str, str] = json.loads(text[text.index("{") :])
    if data.get("Error"):
        raise BuildError(f"download {module}@{version}: {data['Error']}")
    with open(log, "a") as handle:
        handle.write(text)
    return data


# Kueue (v0.19.2 cmd/kueue/main.go:217) reads the metrics server's certificate from a fixed
# /etc/kueue/metrics/certs whenever its internal cert management is off, and exits if it is missing.
# We serve webhooks with our own certificate (internal cert management off), and a per-workdir
# control plane cannot share one path under /etc. So the build compiles Kueue's `main` package
# (one file, no internal imports) from a copy in our wrapper module with that one line changed to
# read KUEUE_METRICS_CERT_DIR first, falling back to the upstream path; every other package comes
# unchanged from the module. (`go build -overlay` cannot replace files in GOMODCACHE.) A release
# that no longer has the line builds upstream's cmd/kueue unpatched.
_KUEUE_METRICS_LINE = 'metricsCertPath := "/etc/kueue/metrics/certs"'
_KUEUE_METRICS_PATCH = (
    'metricsCertPath := func() string { if d := os.Getenv("KUEUE_METRICS_CERT_DIR"); d != "" { return d }; '
    'return "/etc/kueue/metrics/certs" }()'
)


def _kueue_main_package(module_dir: Path, wrapper: Path) -> str:
    """The package to build as ``kueue``: our patched copy of cmd/kueue if the line is there."""
    cmd = module_dir / "cmd" / "kueue"
    sources = sorted(p for p in cmd.glob("*.go") if not p.name.endswith("_test.go"))
    main_go = cmd / "main.go"
    text = main_go.read_text() if main_go.is_file() else ""
    if text.count(_KUEUE_METRICS_LINE) != 1 or '\t"os"\n' not in text:
        return "sigs.k8s.io/kueue/cmd/kueue"
    dest = wrapper / "cmd" / "kueue"
    dest.mkdir(parents=True, exist_ok=True)
    for source in sources:
        body = source.read_text()
        if source == main_go:
            body = body.replace(_KUEUE_METRICS_LINE, _KUEUE_METRICS_PATCH)
        (dest / source.name).write_text(body)
    return "./cmd/kueue"


def _origin_hash(info_file: str) -> str:
    """The commit the proxy recorded for a module version (``Origin.Hash`` of its .info), if any."""
    try:
        return str(json.loads(Path(info_file).read_text())["Origin"]["Hash"])
    except (OSError, KeyError, TypeError, ValueError):
        return ""


def _release_date(info_file: str) -> str:
    try:
        return str(json.loads(Path(info_file).read_text())["Time"])
    except (OSError, KeyError, ValueError):
        return "1970-01-01T00:00:00Z"


def _staging_modules(kubernetes_gomod: Path) -> list[str]:
    """The staging modules ``k8s.io/kubernetes`` replaces with ``./staging/src/...``."""
    found = re.findall(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", kubernetes_gomod.read_text(), re.MULTILINE)
    if not found:
        raise BuildError(f"no staging replaces found in {kubernetes_gomod}; has the layout changed?")
    return sorted(set(found))


def _write_wrapper(
    directory: Path, module: str, requires: dict[str, str], replaces: dict[str, str], tools: list[str]
) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    lines = [f"module gpufabric.local/controlplane/{module}", "", "go 1.26.0", "", "require ("]
    lines += [f"\t{path} {version}" for path, version in sorted(requires.items())]
    lines.append(")")
    if replaces:
        lines += ["", "replace ("]
        lines += [f"\t{path} => {path} {version}" for path, version in sorted(replaces.items())]
        lines.append(")")
    lines += ["", "tool ("]
    lines += [f"\t{tool}" for tool in tools]
    lines += [")", ""]
    (directory / "go.mod").write_text("\n".join(lines))


def _ldflags(*pairs: tuple[str, str]) -> str:
    return " ".join(["-s", "-w", *(f"-X '{name}={value}'" for name, value in pairs)])


def _build_locked(versions: Versions, root: Path, say: Progress) -> Binaries:
    entry = root / versions.cache_key
    work = Path(tempfile.mkdtemp(prefix=f".tmp-{versions.cache_key}-", dir=root))
    out = work / "entry"
    bin_dir = out / "bin"
    bin_dir.mkdir(parents=True)
    logs = work / "logs"
    logs.mkdir()
    env = _go_env(versions)
    total = time.monotonic()
    say(
        f"controlplane: building Kubernetes {versions.kubernetes}, etcd {versions.etcd}, Kueue {versions.kueue} "
        f"into {entry} (GOTOOLCHAIN={versions.gotoolchain}; "
        "about 35 minutes on 2 busy cores the first time, seconds after that)"
    )
    timings: dict[str, float] = {}
    patches: list[str] = []
    step = 0
    steps = len(BINARY_NAMES)

    def build_one(name: str, package: str, module_dir: Path, ldflags: str) -> None:
        nonlocal step
        step += 1
        say(f"[{step}/{steps}] {name}: building {package}")
        started = time.monotonic()
        target = bin_dir / name
        _run_go(
            ["build", "-trimpath", "-ldflags", ldflags, "-o", str(target), package],
            module_dir,
            env,
            logs / f"{name}.log",
            say,
            name,
        )
        timings[name] = round(time.monotonic() - started, 1)
        size = target.stat().st_size / 1e6
        say(f"[{step}/{steps}] {name}: built in {_fmt(timings[name])} ({size:.0f} MB)")

    try:
        # etcd ------------------------------------------------------------------------------------
        etcd_dir = work / "src" / "etcd"
        _write_wrapper(
            etcd_dir, "etcd", {"go.etcd.io/etcd/server/v3": versions.etcd}, {}, ["go.etcd.io/etcd/server/v3"]
        )
        say("controlplane: resolving etcd modules (go mod tidy)")
        _run_go(["mod", "tidy"], etcd_dir, env, logs / "etcd.log", say, "etcd: go mod tidy")
        build_one(
            "etcd",
            "go.etcd.io/etcd/server/v3",
            etcd_dir,
            _ldflags(("go.etcd.io/etcd/api/v3/version.GitSHA", f"release-{versions.etcd}")),
        )

        # Kubernetes ------------------------------------------------------------------------------
        kube_dir = work / "src" / "kubernetes"
        kube_dir.mkdir(parents=True)
        say(f"controlplane: downloading k8s.io/kubernetes {versions.kubernetes}")
        info = _download("k8s.io/kubernetes", versions.kubernetes, kube_dir, env, logs / "kubernetes.log", say)
        staging = _staging_modules(Path(info["GoMod"]))
        _write_wrapper(
            kube_dir,
            "kubernetes",
            {"k8s.io/kubernetes": versions.kubernetes},
            dict.fromkeys(staging, versions.kubernetes_staging),
            [f"k8s.io/kubernetes/cmd/{cmd}" for cmd in _KUBE_CMDS],
        )
        say(
            f"controlplane: resolving Kubernetes modules "
            f"({len(staging)} staging modules pinned at {versions.kubernetes_staging})"
        )
        _run_go(["mod", "tidy"], kube_dir, env, logs / "kubernetes.log", say, "kubernetes: go mod tidy")
        major, minor = re.match(r"v(\d+)\.(\d+)", versions.kubernetes).groups()  # type: ignore[union-attr]
        built = _release_date(info.get("Info", ""))
        kube_flags = _ldflags(
            *[
                (f"{pkg}.{var}", value)
                for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
                for var, value in (
                    ("gitVersion", versions.kubernetes),
                    ("gitMajor", major),
                    ("gitMinor", minor),
                    ("gitTreeState", "clean"),
                    ("buildDate", built),
                )
            ]
        )
        for cmd in _KUBE_CMDS:
            build_one(cmd, f"k8s.io/kubernetes/cmd/{cmd}", kube_dir, kube_flags)

        # Kueue -----------------------------------------------------------------------------------
        kueue_dir = work / "src" / "kueue"
        kueue_dir.mkdir(parents=True)
        kinfo = _download("sigs.k8s.io/kueue", versions.kueue, kueue_dir, env, logs / "kueue.log", say)
        _write_wrapper(kueue_dir, "kueue", {"sigs.k8s.io/kueue": versions.kueue}, {}, ["sigs.k8s.io/kueue/cmd/kueue"])
        package = _kueue_main_package(Path(kinfo["Dir"]), kueue_dir)
        if package.startswith("./"):
            patches.append("kueue: cmd/kueue/main.go reads KUEUE_METRICS_CERT_DIR (built from a patched copy)")
        say("controlplane: resolving Kueue modules (go mod tidy)")
        _run_go(["mod", "tidy"], kueue_dir, env, logs / "kueue.log", say, "kueue: go mod tidy")
        build_one(
            "kueue",
            package,
            kueue_dir,
            _ldflags(
                ("sigs.k8s.io/kueue/pkg/version.GitVersion", versions.kueue),
                ("sigs.k8s.io/kueue/pkg/version.GitCommit", _origin_hash(kinfo.get("Info", ""))),
                ("sigs.k8s.io/kueue/pkg/version.BuildDate", _release_date(kinfo.get("Info", ""))),
            ),
        )
        _copy_kueue_manifests(Path(kinfo["Dir"]), out / "kueue")

        # Keep the resolved wrapper modules beside the binaries: they are the exact build list.
        for name in ("etcd", "kubernetes", "kueue"):
            dest = out / "modules" / name
            dest.mkdir(parents=True)
            for filename in ("go.mod", "go.sum"):
                src = work / "src" / name / filename
                if src.is_file():
                    shutil.copy2(src, dest / filename)
        shutil.copytree(logs, out / "build-logs")
        manifest = {
            "versions": asdict(versions),
            "recipe": BUILD_RECIPE,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seconds": timings,
            "total_seconds": round(time.monotonic() - total, 1),
            "patches": patches,
            "go": subprocess.run([_go(), "version"], env=env, capture_output=True, text=True).stdout.strip(),
        }
        (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        if entry.exists():  # an incomplete entry from an older layout: replace it
            shutil.rmtree(entry)
        os.rename(out, entry)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"controlplane: all binaries built in {_fmt(time.monotonic() - total)} -> {entry / 'bin'}")
    return Binaries(entry, versions, cache_hit=False)


def _copy_kueue_manifests(module_dir: Path, dest: Path) -> None:
    crds = sorted((module_dir / "config" / "components" / "crd" / "bases").glob("*.yaml"))
    if not crds:
        raise BuildError(f"no Kueue CRDs under {module_dir}/config/components/crd/bases")
    (dest / "crd").mkdir(parents=True)
    for crd in crds:
        shutil.copyfile(crd, dest / "crd" / crd.name)
    webhook = module_dir / "config" / "components" / "webhook" / "manifests.yaml"
    (dest / "webhook").mkdir(parents=True)
    shutil.copyfile(webhook, dest / "webhook" / "manifests.yaml")
    # The module's own configuration sample documents every option of this release.
    sample = module_dir / "config" / "components" / "manager" / "controller_manager_config.yaml"
    if sample.is_file():
        shutil.copyfile(sample, dest / "controller_manager_config.sample.yaml")
