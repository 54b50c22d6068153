"""Per-runner engine arguments: how the settings read, which flags the launcher adds, what it refuses."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from service.config import Settings, UnknownSetting
from service.config.engine import EngineArgs, option_name
from service.runners.launcher import RunnerConfigError, RunnerSpec, runner_specs


def _by_name(settings: Settings, *, cpu: bool = False) -> dict[str, RunnerSpec]:
    return {s.name: s for s in runner_specs(settings, cpu=cpu)}


def test_environment_names_reach_each_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSERVE_ENGINE__EMBED__MAX_NUM_SEQS", "128")
    monkeypatch.setenv("RAGSERVE_ENGINE__RERANK__KV_CACHE_DTYPE", "fp8_e4m3")
    monkeypatch.setenv("RAGSERVE_ENGINE__RERANK__MAX_NUM_BATCHED_TOKENS", "16384")
    monkeypatch.setenv("RAGSERVE_ENGINE__GENERATE__EXTRA_ARGS", "--enable-prefix-caching --seed 7")
    specs = _by_name(Settings(profile="qwen3"))
    assert specs["embedding"].args[-4:] == ["--tensor-parallel-size", "1", "--max-num-seqs", "128"]
    assert specs["rerank"].args[-6:] == ["--tensor-parallel-size", "1", "--max-num-batched-tokens", "16384",
                                         "--kv-cache-dtype", "fp8_e4m3"]
    assert specs["generate"].args[-3:] == ["--enable-prefix-caching", "--seed", "7"]
    assert specs["generate"].extra_args == ["--enable-prefix-caching", "--seed", "7"]
    assert specs["generate"].engine_key == "generate"


def test_a_misspelt_setting_name_is_refused_with_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSERVE_ENGINE__EMBED__MAX_NUM_SEQ", "128")
    with pytest.raises(UnknownSetting, match=r"RAGSERVE_ENGINE__EMBED__MAX_NUM_SEQ \(did you mean "
                                             r"RAGSERVE_ENGINE__EMBED__MAX_NUM_SEQS\?\)"):
        Settings()
    monkeypatch.delenv("RAGSERVE_ENGINE__EMBED__MAX_NUM_SEQ")
    with pytest.raises(ValidationError, match="engine.embed.max_num_seq"):  # given in code: pydantic's refusal
        Settings(engine={"embed": {"max_num_seq": 128}})


@pytest.mark.parametrize(("value", "expected"), [
    ('["--enable-prefix-caching", "--hf-overrides", "{\\"a\\": 1}"]', ["--enable-prefix-caching", "--hf-overrides", '{"a": 1}']),
    ("--override-generation-config '{\"temperature\": 0.2}'", ["--override-generation-config", '{"temperature": 0.2}']),
    ("", []),
])
def test_extra_args_are_a_json_list_or_shell_words(value: str, expected: list[str]) -> None:
    assert EngineArgs(extra_args=value).extra_args == expected  # type: ignore[arg-type]


def test_kv_cache_dtype_takes_the_hosted_endpoints_choices() -> None:
    for dtype in ("auto", "fp8", "fp8_e5m2", "fp8_e4m3"):
        EngineArgs(kv_cache_dtype=dtype)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        EngineArgs(kv_cache_dtype="int8")  # type: ignore[arg-type]
    assert EngineArgs(kv_cache_dtype="fp8").kv_bytes(2) == 1 and EngineArgs().kv_bytes(2) == 2


def test_extra_args_may_not_repeat_a_setting_of_their_own() -> None:
    with pytest.raises(ValidationError, match="--max_num_seqs has its own setting: set MAX_NUM_SEQS"):
        EngineArgs(extra_args=["--max_num_seqs=8"])
    assert option_name("--max_num_seqs=8") == "--max-num-seqs"
    assert option_name("--hf-overrides.architectures+") == "--hf-overrides"
    assert option_name("-tp") is None and option_name("8") is None


@pytest.mark.parametrize(("runner", "arg", "why"), [
    ("generate", "--allowed-media-domains", "ragserve sets it itself"),
    ("generate", "--port=9", "ragserve sets it itself"),
    ("embedding", "--max-model-len", "ragserve sets it itself"),
    ("rerank", "--chat-template", "ragserve sets it itself"),
    ("embedding", "--allowed-local-media-path", "local files"),
    ("rerank", "--config", "past every check"),
    ("generate", "-h", "prints help"),
])
def test_extra_args_may_not_override_the_launchers_flags(runner: str, arg: str, why: str) -> None:
    key = {"embedding": "embed", "rerank": "rerank", "generate": "generate"}[runner]
    settings = Settings(profile="qwen3", engine={key: {"extra_args": [arg, "x"]}})
    with pytest.raises(RunnerConfigError, match=f"RAGSERVE_ENGINE__{key.upper()}__EXTRA_ARGS may not contain.*{why}"):
        runner_specs(settings, cpu=False)


def test_parallel_sizes_become_flags_and_gpus_become_visible_devices() -> None:
    settings = Settings(profile="qwen3-large", runners={"gpu_memory_utilization": 0.9},
                        generation={"gpu_memory_utilization": 0.9},
                        engine={"embed": {"gpus": "0"}, "rerank": {"gpus": "1"},
                                "generate": {"tensor_parallel_size": 4, "gpus": "2,3,4,5"}})
    specs = _by_name(settings)
    gen = specs["generate"]
    assert gen.served_name == "Qwen/Qwen3-VL-32B-Instruct"
    assert gen.args[gen.args.index("--tensor-parallel-size") + 1] == "4"
    assert gen.env["CUDA_VISIBLE_DEVICES"] == "2,3,4,5"
    assert specs["embedding"].env["CUDA_VISIBLE_DEVICES"] == "0"
    assert "CUDA_VISIBLE_DEVICES" not in _by_name(Settings(profile="qwen3"))["embedding"].env


def test_gpu_shares_are_summed_per_device() -> None:
    """Without device lists every runner starts on GPU 0 (the one-host default); with them, each GPU
    carries only its own runners' shares."""
    greedy = {"runners": {"gpu_memory_utilization": 0.9}, "generation": {"gpu_memory_utilization": 0.9}}
    with pytest.raises(RunnerConfigError, match="GPU 0 would claim 2.70 of the GPU's memory"):
        runner_specs(Settings(profile="qwen3-large", **greedy), cpu=False)
    with pytest.raises(RunnerConfigError, match="GPU 2 would claim 1.80"):  # embed and the generator meet on 2
        runner_specs(Settings(profile="qwen3-large", **greedy, engine={
            "embed": {"gpus": [2]}, "rerank": {"gpus": [1]}, "generate": {"tensor_parallel_size": 2, "gpus": [2, 3]}}),
            cpu=False)
    split = {"embed": {"gpus": [0]}, "rerank": {"gpus": [1]}, "generate": {"tensor_parallel_size": 2, "gpus": [2, 3]}}
    assert len(runner_specs(Settings(profile="qwen3-large", **greedy, engine=split), cpu=False)) == 3


def test_gpus_must_cover_the_layout() -> None:
    with pytest.raises(ValidationError, match="gpus names 2 devices but TP x PP x DP = 4"):
        EngineArgs(tensor_parallel_size=2, data_parallel_size=2, gpus=[0, 1])


def test_cpu_runners_get_no_parallel_flags_unless_asked() -> None:
    specs = _by_name(Settings(profile="qwen3"), cpu=True)
    assert all("--tensor-parallel-size" not in s.args for s in specs.values())
    asked = _by_name(Settings(profile="qwen3", engine={"embed": {"tensor_parallel_size": 2}}), cpu=True)
    assert asked["embedding"].args[-2:] == ["--tensor-parallel-size", "2"]
