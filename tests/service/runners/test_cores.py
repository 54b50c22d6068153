"""The CPU core plan of vLLM-CPU runners (service/runners/cores.py) and the launcher's use of it."""

from __future__ import annotations

import pytest

from service.config import Settings
from service.runners import launcher
from service.runners.cores import BIND, RESERVED, plan_cores
from service.runners.launcher import RunnerConfigError, runner_specs


def binds(plans: list[dict[str, str]]) -> list[str | None]:
    return [p.get(BIND) for p in plans]


def test_one_runner_computes_on_every_core_and_keeps_none_in_reserve() -> None:
    for plan in ("auto", "shared", "split"):
        assert plan_cores([1], [0, 1], plan, environ={}) == [{BIND: "0-1", RESERVED: "0"}]  # type: ignore[arg-type]


def test_auto_shares_a_small_host_and_splits_a_large_one() -> None:
    assert binds(plan_cores([1, 1], [0, 1], "auto", environ={})) == ["0-1", "0-1"]
    assert binds(plan_cores([1, 1, 1], [0, 1, 2, 3, 4], "auto", environ={})) == ["0-4", "0-4", "0-4"]
    assert binds(plan_cores([1, 1, 1], list(range(6)), "auto", environ={})) == ["0-1", "2-3", "4-5"]
    assert binds(plan_cores([1, 1], list(range(16)), "auto", environ={})) == ["0-7", "8-15"]


def test_split_is_contiguous_and_as_even_as_the_count_allows_the_first_runners_longer() -> None:
    assert binds(plan_cores([1, 1, 1], list(range(8)), "split", environ={})) == ["0-2", "3-5", "6-7"]
    assert binds(plan_cores([1, 1], [0, 1], "split", environ={})) == ["0", "1"]
    assert binds(plan_cores([1, 1, 1], [0, 1], "split", environ={})) == ["0-1", "0-1", "0-1"]  # fewer cores: shared


def test_cpu_ids_of_a_cpuset_keep_their_gaps() -> None:
    assert binds(plan_cores([1], [2, 3, 4, 8, 10, 11], "auto", environ={})) == ["2-4,8,10-11"]
    assert binds(plan_cores([1, 1], [2, 3, 4, 8], "split", environ={})) == ["2-3", "4,8"]


def test_each_worker_process_of_a_runner_gets_its_own_part() -> None:
    assert binds(plan_cores([2, 1], list(range(8)), "split", environ={})) == ["0-1|2-3", "4-7"]
    assert binds(plan_cores([2], [0, 1, 2], "shared", environ={})) == ["0-1|2"]
    with pytest.raises(ValueError, match="a runner of 4 worker processes .* cannot be bound to 2 CPU core"):
        plan_cores([4], [0, 1], "auto", environ={})


@pytest.mark.parametrize("user", [{BIND: "0-3"}, {RESERVED: "1"}, {BIND: "auto"}])
def test_the_users_own_variables_win_and_nothing_is_planned(user: dict[str, str]) -> None:
    assert plan_cores([1, 1], list(range(8)), "split", environ=user) == [{}, {}]


def test_vllm_plan_sets_nothing() -> None:
    assert plan_cores([1, 1], [0, 1], "vllm", environ={}) == [{}, {}]


def test_launcher_binds_each_runner_of_the_profile_in_start_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher, "allowed_cpus", lambda: list(range(12)))
    monkeypatch.delenv(BIND, raising=False)
    monkeypatch.delenv(RESERVED, raising=False)
    s = Settings(profile="qwen3", runners={"embed_url": "http://127.0.0.1:9001,http://127.0.0.1:9011"})
    specs = runner_specs(s, cpu=True)
    assert [(x.label, x.env.get(BIND), x.env.get(RESERVED)) for x in specs] == [
        ("embedding", "0-2", "0"), ("embedding-2", "3-5", "0"), ("rerank", "6-8", "0"), ("generate", "9-11", "0")]
    assert specs[0].env["VLLM_CPU_KVCACHE_SPACE"] == "1"  # the plan adds to the runner's environment
    on_gpu = runner_specs(Settings(profile="qwen3"), cpu=False)
    assert all(BIND not in x.env and RESERVED not in x.env for x in on_gpu)


def test_launcher_refuses_a_plan_that_cannot_bind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher, "allowed_cpus", lambda: [0, 1])
    monkeypatch.delenv(BIND, raising=False)
    monkeypatch.delenv(RESERVED, raising=False)
    s = Settings(profile="minilm", engine={"embed": {"tensor_parallel_size": 4}})
    with pytest.raises(RunnerConfigError, match="cannot be bound to 2 CPU core"):
        runner_specs(s, cpu=True)
