"""`ragserve runners plan`: what it plans each runner with (the launcher's own numbers), and what it prints."""

from __future__ import annotations

import pytest

from service.cli import main
from service.config import Settings
from service.runners.launcher import runner_specs
from service.runners.plan_report import plan_runner, profile_runners
from service.runners.planner import Gpus, Layout


def _flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


@pytest.mark.parametrize("settings", [
    Settings(profile="qwen3"),
    Settings(profile="qwen3", runners={"max_model_len": 4096, "gpu_memory_utilization": 0.15},
             generation={"max_model_len": 6144}, engine={"generate": {"kv_cache_dtype": "fp8"}}),
])
def test_the_planner_counts_what_the_launcher_starts(settings: Settings) -> None:
    planned = {r.name: r for r in profile_runners(settings)}
    for spec in runner_specs(settings, cpu=False):
        runner = planned[spec.name]
        assert runner.arch.name == spec.served_name
        assert runner.max_model_len == int(_flag(spec.args, "--max-model-len")), spec.name
        assert runner.utilization == float(_flag(spec.args, "--gpu-memory-utilization")), spec.name
        dtype = _flag(spec.args, "--kv-cache-dtype") if "--kv-cache-dtype" in spec.args else "auto"
        assert runner.engine.kv_cache_dtype == dtype


def test_qwen3_models_are_data_parallel_on_any_gpu_count() -> None:
    """0.6B (1.11 GiB) and 2B (3.97 GiB) fit one GPU with room for many sequences: more GPUs are copies. Where
    their share of a small GPU is too little (0.20 of 16 GiB leaves 5,520 tokens < 8,192), the planner gives
    them a GPU of their own rather than splitting them."""
    for gpus in (Gpus(1, 24), Gpus(4, 24), Gpus(8, 80), Gpus(2, 16)):
        for runner in profile_runners(Settings(profile="qwen3")):
            plan = plan_runner(runner, gpus)
            assert plan.choice is not None and plan.choice.layout == Layout(dp=gpus.count), (gpus, runner.name)
    small = plan_runner(profile_runners(Settings(profile="qwen3"))[0], Gpus(2, 16))
    assert small.own_gpu and small.share == 0.9


def test_qwen3_large_generator_is_tensor_parallel_on_24gb_gpus() -> None:
    generate = profile_runners(Settings(profile="qwen3-large"))[-1]
    plan = plan_runner(generate, Gpus(4, 24), utilization=0.9)
    assert plan.choice is not None and plan.choice.layout == Layout(tp=4)


def test_output_for_the_hugging_face_example(capsys: pytest.CaptureFixture[str]) -> None:
    main(["runners", "plan", "--gpus", "4", "--gpu-memory", "80", "--model", "meta-llama/Meta-Llama-3-8B-Instruct"])
    out = capsys.readouterr().out
    assert "8.03 B params x 2 B = 14.96 GiB" in out
    assert "2 x 32 layers x 8 KV heads x 128 x 2 B (kv-cache-dtype auto) = 128 KiB" in out
    rows = [line for line in out.splitlines() if line.lstrip("=> ").startswith("TP") and "GiB" in line]
    assert [r.split()[0].lstrip("=>") for r in rows] == ["TP4", "TP2", "TP1"]
    assert "2,187,600" in rows[0] and "267.04x" in rows[0] and "lowest latency" in rows[0]
    assert "1,032,528" in rows[1] and "balanced" in rows[1]
    assert rows[2].startswith("=>") and "454,992" in rows[2] and "most throughput" in rows[2]
    assert "flags       --tensor-parallel-size 1 --data-parallel-size 4 --gpu-memory-utilization 0.9" in out


def test_output_for_qwen3_on_one_24gb_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    main(["runners", "plan", "--gpus", "1", "--gpu-memory", "24", "--profile", "qwen3"])
    out = capsys.readouterr().out
    assert "embedding 0.2 + rerank 0.2 + generate 0.5 = 0.90 of each GPU" in out
    assert out.count("=>TP1 x DP1") == 3
    assert "20,496" in out and "61,152" in out  # pooling: 4.8 GiB share; generator: 12 GiB share
    assert "RAGSERVE_ENGINE__GENERATE__TENSOR_PARALLEL_SIZE=1" in out


def test_fp8_from_the_command_line_doubles_the_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    main(["runners", "plan", "--gpus", "4", "--gpu-memory", "24", "--profile", "qwen3-large",
          "--gpu-memory-utilization", "0.9", "--kv-cache-dtype", "fp8"])
    out = capsys.readouterr().out
    assert "=>TP4 x DP1" in out and "149,600" in out
    assert "RAGSERVE_ENGINE__GENERATE__TENSOR_PARALLEL_SIZE=4" in out


def test_unknown_models_are_refused_cleanly(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="no architecture for 'acme/unknown'"):
        main(["runners", "plan", "--gpus", "1", "--gpu-memory", "24", "--model", "acme/unknown"])
