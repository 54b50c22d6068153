"""Runner command lines against the installed vLLM's own parser (a real import of vLLM, in a child process:
about 20 s, so every case goes through one call)."""

from __future__ import annotations

import pytest

from service.config import Settings
from service.runners.launcher import RunnerConfigError, RunnerSpec, check_command_lines, runner_specs

pytest.importorskip("vllm")


def _case(name: str, engine: dict[str, object], runner: str = "generate") -> RunnerSpec:
    key = {"embedding": "embed", "rerank": "rerank", "generate": "generate"}[runner]
    settings = Settings(profile="qwen3", engine={key: engine})
    (spec,) = [s for s in runner_specs(settings, cpu=False) if s.name == runner]
    spec.name = name
    return spec


CASES = {
    "defaults": {},
    "hosted_knobs": {"max_num_seqs": 64, "max_num_batched_tokens": 8192, "kv_cache_dtype": "fp8_e5m2",
                     "tensor_parallel_size": 2, "extra_args": ["--enable-prefix-caching", "--seed=3"]},
    "typo": {"extra_args": ["--enable-prefix-cachin"]},
    "abbreviation": {"extra_args": ["--max-num-seq", "8"]},
    "bad_value": {"extra_args": ["--block-size", "many"]},
    "bad_choice": {"extra_args": ["--scheduling-policy", "lottery"]},
    "stray": {"extra_args": ["Qwen/Other"]},
}


@pytest.fixture(scope="module")
def refusal() -> str:
    specs = [_case(name, engine) for name, engine in CASES.items()]
    with pytest.raises(RunnerConfigError) as caught:
        check_command_lines(specs)
    return str(caught.value)


def test_the_shipped_command_lines_parse(refusal: str) -> None:
    lines = {line.split(" runner:")[0]: line for line in refusal.splitlines()}
    assert "defaults" not in lines and "hosted_knobs" not in lines, refusal


@pytest.mark.parametrize(("case", "expected"), [
    ("typo", "unrecognized argument: --enable-prefix-cachin (did you mean --enable-prefix-caching?) "
             "(from RAGSERVE_ENGINE__GENERATE__EXTRA_ARGS)"),
    ("abbreviation", "unrecognized argument: --max-num-seq (did you mean --max-num-seqs?)"),
    ("bad_value", "argument --block-size: invalid int value: 'many'"),
    ("bad_choice", "argument --scheduling-policy: invalid choice: 'lottery'"),
    ("stray", "stray positional argument 'Qwen/Other'"),
])
def test_a_refused_argument_is_named_with_its_setting(refusal: str, case: str, expected: str) -> None:
    [line] = [line for line in refusal.splitlines() if line.startswith(f"{case} runner:")]
    assert line.split(": ", 1)[1].startswith("vLLM ") and "refuses its command line" in line
    assert expected in line, line
