"""The two images of docker/ build what the provider needs, at pinned versions that agree: base images
pinned, Airflow's and Python's versions the same as pyproject.toml allows and as each other's,
one constraints file for both images (driver and executors run the same pyspark), the Spark
image installs every package the executor-side code imports, and each build context admits the
files its Dockerfile copies."""

from __future__ import annotations

import ast
import fnmatch
import importlib.metadata
import re
import sys

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.docker.compose_file import DOCKER_DIR, ROOT, load

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest's own TOML reader
    import tomli as tomllib

DOCKERFILES = {"airflow": DOCKER_DIR / "airflow.Dockerfile", "spark": DOCKER_DIR / "spark.Dockerfile"}
EXECUTOR_CODE = ("airflow_copycat/connect", "airflow_copycat/connectors", "airflow_copycat/runtime",
                 "airflow_copycat/distcp", "spark_apps")
"""What runs inside Spark tasks: the Airflow layer (hooks, operators, sensors, triggers) never does."""
IMAGE_PYTHON = {"python_version": "3.11", "python_full_version": "3.11.0", "sys_platform": "linux",
                "platform_system": "Linux", "implementation_name": "cpython"}


def instructions(path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(line for line in path.read_text().splitlines()
                                         if not line.lstrip().startswith("#")))
    return [(m.group(1).upper(), m.group(2).strip()) for m in re.finditer(r"^\s*(\w+)\s+(.*)$", text, re.M)]


def base_images(path) -> list[str]:
    """The images a Dockerfile builds FROM (references to its own stages left out)."""
    stages, images = set(), []
    for op, args in instructions(path):
        if op == "FROM":
            words = args.split()
            if words[0] not in stages:
                images.append(words[0])
            if len(words) == 3 and words[1].upper() == "AS":
                stages.add(words[2])
    return images


def copy_sources(path) -> list[str]:
    """Paths (relative to the build context) a Dockerfile COPYs from the context."""
    sources = []
    for op, args in instructions(path):
        if op in ("COPY", "ADD"):
            words = args.split()
            if any(w.startswith("--from=") for w in words):
                continue
            sources += [w for w in words if not w.startswith("--")][:-1]
    return sources


def constraints() -> dict[str, str]:
    """Canonical name -> pinned version of docker/constraints.txt; a line without ``==`` fails."""
    pins = {}
    for line in (DOCKER_DIR / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and version, f"constraints.txt: {line!r} is not pinned to one version (name==version)"
            pins[canonicalize_name(name)] = version
    return pins


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def tag_of(image: str) -> str:
    return image.rsplit(":", 1)[1] if ":" in image.split("/")[-1] else ""


def test_base_images_are_pinned_and_agree():
    airflow_from, spark_from = base_images(DOCKERFILES["airflow"]), base_images(DOCKERFILES["spark"])
    for image in airflow_from + spark_from:
        assert re.match(r"^\d+\.\d+", tag_of(image)), f"base image {image!r} is not pinned to a release"
    airflow = next(i for i in airflow_from if i.startswith("apache/airflow:"))
    m = re.fullmatch(r"(\d+\.\d+\.\d+)-python(\d+\.\d+)", tag_of(airflow))
    assert m, f"{airflow}: use apache/airflow:<version>-python<major.minor>"
    airflow_version, airflow_python = m.groups()
    assert constraints()["apache-airflow"] == airflow_version, "the base tag and constraints.txt name other Airflows"
    python = next(i for i in spark_from if i.startswith("python:"))
    assert tag_of(python).startswith(airflow_python + "."), \
        f"executors ({python}) and the driver (Python {airflow_python}) must run the same Python minor version"
    assert Version(airflow_python) in Requirement(f"x{project()['requires-python']}").specifier
    javas = {tag_of(i).split(".")[0] for i in airflow_from + spark_from if i.startswith("eclipse-temurin:")}
    assert len(javas) == 1 and int(javas.pop()) >= 17, "one Java, 17 or newer (Spark 4), in both images"


def test_constraints_pin_every_dependency_at_a_version_pyproject_allows():
    pins = constraints()
    for spec in project()["dependencies"]:
        req = Requirement(spec)
        if req.marker and not req.marker.evaluate(IMAGE_PYTHON):
            continue
        name = canonicalize_name(req.name)
        assert name in pins, f"pyproject.toml needs {req.name}, which docker/constraints.txt does not pin"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"docker/constraints.txt pins {req.name}=={pins[name]}, outside pyproject.toml's {req.specifier}"


def test_both_images_install_from_the_one_constraints_file():
    for name, path in DOCKERFILES.items():
        assert "docker/constraints.txt" in copy_sources(path), f"the {name} image ignores docker/constraints.txt"
        runs = " ".join(args for op, args in instructions(path) if op == "RUN")
        assert re.search(r"pip install .*-c /opt/copycat/constraints\.txt", runs), f"{name}: install with -c"
    # the Spark provider's pyspark-client overwrites pyspark's files: pyspark is reinstalled from the pins
    assert "grep '^pyspark==' /opt/copycat/constraints.txt" in DOCKERFILES["airflow"].read_text()


def third_party_imports() -> dict[str, str]:
    """Top-level modules the executor-side code imports that are neither stdlib nor ours -> a file."""
    found = {}
    for root in EXECUTOR_CODE:
        for path in sorted((ROOT / root).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in ("airflow_copycat", "spark_apps"):
                        found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def test_spark_image_installs_what_executors_import():
    wanted = {canonicalize_name(Requirement(line).name)
              for line in (DOCKER_DIR / "spark" / "requirements.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    assert not wanted - set(constraints()), f"unpinned Spark image packages: {wanted - set(constraints())}"
    distributions = importlib.metadata.packages_distributions()
    imports = third_party_imports()
    assert {"pyarrow", "confluent_kafka", "fsspec"} <= set(imports)  # the scan sees the executor code
    for module, where in imports.items():
        if module not in distributions:
            continue  # an optional import that is absent here too (e.g. compression.zstd before 3.14)
        dists = {canonicalize_name(d) for d in distributions[module]}
        assert dists & wanted, f"{where} imports {module} ({', '.join(sorted(dists))}), " \
                               "which docker/spark/requirements.txt does not install"


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether a .dockerignore excludes ``path``: the last matching pattern decides (``!`` re-includes)."""
    excluded = False
    for pattern in patterns:
        negated, pat = pattern.startswith("!"), pattern.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, pat) or path.startswith(pat + "/") or \
                (pat.startswith("**/") and any(fnmatch.fnmatch(part, pat[3:]) for part in path.split("/"))):
            excluded = not negated
    return excluded


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_build_context_admits_what_the_dockerfile_copies(name):
    dockerfile = DOCKERFILES[name]
    builds = [svc["build"] for svc in load()["services"].values()
              if svc.get("build", {}).get("dockerfile") == f"docker/{dockerfile.name}"]
    assert builds and all((DOCKER_DIR / b["context"]).resolve() == ROOT for b in builds), \
        f"compose builds {dockerfile.name} from the repository root"
    ignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
    patterns = [line.strip() for line in ignore.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert ignored(".venv/bin/python", patterns), f"{ignore.name} lets the virtualenv into the build context"
    for source in copy_sources(dockerfile):
        path = ROOT / source
        assert path.exists(), f"{dockerfile.name} copies {source}, which does not exist"
        files = [p for p in path.rglob("*.py")] if path.is_dir() else [path]
        for f in files[:50]:
            rel = str(f.relative_to(ROOT))
            if "__pycache__" not in rel:
                assert not ignored(rel, patterns), f"{ignore.name} keeps {rel} out, but {dockerfile.name} copies it"


def env_of(path) -> dict[str, str]:
    """The ENV settings of a Dockerfile (``KEY=value`` form), later ones winning."""
    env = {}
    for op, args in instructions(path):
        if op == "ENV":
            env.update(re.findall(r"(\w+)=(\S+)", args))
    return env


def test_images_and_compose_agree_on_the_executors_python():
    airflow_env, spark_env = env_of(DOCKERFILES["airflow"]), env_of(DOCKERFILES["spark"])
    assert airflow_env["PYSPARK_PYTHON"] == spark_env["PYSPARK_PYTHON"], "spark-submit names one interpreter for both"
    for name, svc in load()["services"].items():
        python = (svc.get("environment") or {}).get("PYSPARK_PYTHON")
        assert python in (None, spark_env["PYSPARK_PYTHON"]), f"service {name} sets PYSPARK_PYTHON={python}"
    python_minor = tag_of(next(i for i in base_images(DOCKERFILES["spark"]) if i.startswith("python:")))
    assert f"/python{'.'.join(python_minor.split('.')[:2])}/site-packages/pyspark" in spark_env["SPARK_HOME"], \
        "SPARK_HOME must be the pyspark of the image's Python"
