"""deploy/Dockerfile, checked statically (no Docker daemon here): pinned base, the lock installed
wheels-only, every package the project ships copied in, a numeric non-root user that matches the
manifests, and a .dockerignore that keeps local state and secrets out of the build context."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: comments dropped, backslash continuations joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        out.append((keyword.upper(), args.strip()))
    assert not pending, "Dockerfile ends inside a continued instruction"
    return out


def _all(keyword: str) -> list[str]:
    return [a for k, a in instructions(DOCKERFILE.read_text()) if k == keyword]


def test_instruction_parser_joins_continuations_and_drops_comments() -> None:
    parsed = instructions("# c\nFROM a:1\nRUN x \\\n  # inner\n && y\nUSER 1\n")
    assert parsed == [("FROM", "a:1"), ("RUN", "x  && y"), ("USER", "1")]


def test_base_image_is_slim_python_311_pinned_by_patch_tag_or_digest() -> None:
    (base,) = _all("FROM")
    match = re.fullmatch(r"python:(?P<tag>[\w.-]+)(@sha256:[0-9a-f]{64})?", base)
    assert match, base
    tag = match["tag"]
    # 3.11.N: a moving 3.11 or latest tag would change the interpreter under the lock
    assert re.fullmatch(r"3\.11\.\d+-slim(-\w+)?", tag), tag
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert ">=3.11" in requires and "<3.12" in requires


def test_the_lock_is_installed_wheels_only_before_the_project_without_deps() -> None:
    runs = _all("RUN")
    lock = [r for r in runs if "requirements.txt" in r]
    assert len(lock) == 1
    words = shlex.split(lock[0])
    assert "--only-binary=:all:" in words and "-c" in words
    assert words[words.index("-c") + 1].endswith("constraints.txt")
    project = [r for r in runs if re.search(r"pip install .*--no-deps", r)]
    assert len(project) == 1 and runs.index(project[0]) > runs.index(lock[0])
    assert shlex.split(project[0])[-1] == "."


def test_every_shipped_package_and_data_dir_is_copied() -> None:
    copied = {source for c in _all("COPY") for source in shlex.split(c)[:-1]}
    includes = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {p.rstrip("*") for p in includes}
    # dbt/ and sql/ are found next to the packages (assets/dbt/assets.py, connectors/warehouse/migrate.py)
    for needed in (*packages, "dbt", "sql", "pyproject.toml", "README.md"):
        assert needed in copied, needed
        assert (ROOT / needed).exists(), needed
    ignored = {
        line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }  # fmt: skip
    assert {".venv", ".data", ".git", "gpufabric.yaml"} <= ignored
    assert not copied & ignored, copied & ignored


def test_runs_as_the_numeric_non_root_user_the_manifests_require() -> None:
    users = _all("USER")
    assert users, "no USER: the image would run as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, uid
    kinds = [k for k, _ in instructions(DOCKERFILE.read_text())]
    # nothing after the last USER runs as root again
    assert "RUN" not in kinds[len(kinds) - 1 - kinds[::-1].index("USER") :]
    docs = [d for f in sorted((ROOT / "deploy").rglob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    pods = [d["spec"]["template"]["spec"] for d in docs if d["kind"] == "Deployment"]
    assert pods and {p["securityContext"]["runAsUser"] for p in pods} == {int(uid)}


def test_default_command_serves_the_code_location_the_helm_values_name() -> None:
    (cmd,) = _all("CMD")
    argv = yaml.safe_load(cmd)  # exec form: a JSON array
    assert argv[:3] == ["dagster", "api", "grpc"]
    values = yaml.safe_load((ROOT / "deploy" / "helm" / "values.yml").read_text())
    grpc_args = values["dagster-user-deployments"]["deployments"][0]["dagsterApiGrpcArgs"]
    assert argv[argv.index("--module-name") + 1] == grpc_args[grpc_args.index("--module-name") + 1]
    # no ENTRYPOINT: deploy/*/ Deployments give the whole command line as args
    assert _all("ENTRYPOINT") == []
