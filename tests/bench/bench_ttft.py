"""Time to first token for a new image vs the same image again, at two image sizes, side by side.

    python -m tests.bench.bench_ttft                       # builds the tiny VL checkpoint, starts one runner
    python -m tests.bench.bench_ttft --url http://127.0.0.1:8104 --model Qwen/Qwen3-VL-2B-Instruct

Without ``--url`` the tiny random Qwen3-VL checkpoint is built and served by the launcher's own generator
command (production's flags: the size hint, the processor cache, prefix caching on by default), so what
is measured is vLLM's handling of a repeated image - its multimodal processor cache and its prefix cache
keyed on the image - not the model's quality. Each image goes through ragserve's own media pipeline first
(decode, downsize, re-encode), exactly as a request's image does, and the request is sent to the runner
directly with the grounded prompt layout (system prompt, then the image, then the question), so the
number is the runner's, without ragserve's HTTP hop. TTFT is the time from sending a streamed request to
its first event (vLLM sends the first event once the first token exists).

For each size: one warm-up request, then ``--rounds`` pairs of (a never-seen image, the same image again).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx

from service.config import Settings
from service.generation.prompts import GROUNDED_SYSTEM_PROMPT
from service.media.images import ImageLimits, prepare_image
from service.profiles import QWEN3
from service.runners.launcher import runner_specs, running
from tests.support.images import noise_png
from tests.support.runners import free_port


def ttft_ms(client: httpx.Client, url: str, model: str, image_url: str) -> tuple[float, int]:
    body = {
        "model": model, "max_tokens": 1, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [
            {"role": "system", "content": GROUNDED_SYSTEM_PROMPT},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": image_url}},
                                         {"type": "text", "text": "Question: what does the image show?"}]},
        ],
    }
    prompt_tokens = 0
    started = time.perf_counter()
    first: float | None = None
    with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            if first is None:
                first = time.perf_counter()
            if '"usage"' in line and '"prompt_tokens"' in line:
                usage = json.loads(line[6:]).get("usage") or {}
                prompt_tokens = int(usage.get("prompt_tokens") or prompt_tokens)
    assert first is not None, "no event streamed"
    return (first - started) * 1000, prompt_tokens


def measure(url: str, model: str, sizes: list[int], rounds: int) -> list[dict[str, float]]:
    rows = []
    seed = 1000
    with httpx.Client(timeout=300) as client:
        for size in sizes:
            limits = ImageLimits(max_bytes=50_000_000, max_pixels=100_000_000, max_side=size)

            def image(seed: int, size: int = size, limits: ImageLimits = limits) -> str:
                return prepare_image(noise_png(size, seed), limits).data_url

            seed += 1
            ttft_ms(client, url, model, image(seed))  # warm-up for this size
            new, again = [], []
            tokens = 0
            for _ in range(rounds):
                seed += 1
                data_url = image(seed)
                t_new, tokens = ttft_ms(client, url, model, data_url)
                t_again, _ = ttft_ms(client, url, model, data_url)
                new.append(t_new)
                again.append(t_again)
                print(f"  {size}x{size}: new {t_new:7.1f} ms   same again {t_again:7.1f} ms", file=sys.stderr)
            rows.append({"size": size, "prompt_tokens": tokens, "new_ms": statistics.median(new),
                         "again_ms": statistics.median(again), "new_min": min(new), "again_min": min(again)})
    return rows


def format_table(rows: list[dict[str, float]], rounds: int) -> str:
    lines = [
        f"Time to first token, median of {rounds} (min in brackets); new image vs the same image again",
        "| image | prompt tokens | new image | same image again | new / again |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {int(r['size'])}x{int(r['size'])} | {int(r['prompt_tokens'])} | {r['new_ms']:.1f} ms ({r['new_min']:.1f}) "
            f"| {r['again_ms']:.1f} ms ({r['again_min']:.1f}) | {r['new_ms'] / r['again_ms']:.1f}x |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a generation runner already up (default: start the tiny one)")
    parser.add_argument("--model", default=QWEN3.generator.name if QWEN3.generator else "")
    parser.add_argument("--sizes", type=int, nargs="+", default=[448, 896])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--site", type=Path, help="torchvision side-install (default: <venv>/vl-site)")
    parser.add_argument("--runner-arg", action="append", default=[],
                        help="extra vLLM flag for the started runner, e.g. --runner-arg=--no-enable-prefix-caching")
    args = parser.parse_args(argv)
    with ExitStack() as stack:
        url = args.url
        if url is None:
            from tests.support.tiny_qwen3_vl import build_tiny_qwen3_vl

            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-ttft-")))
            model_dir = build_tiny_qwen3_vl(root / "model")
            generation: dict[str, object] = {"max_model_len": 4096, "cpu_kvcache_gib": 1}
            if args.site:
                generation["cpu_extra_site"] = str(args.site)
            settings = Settings(
                profile="qwen3", generation=generation, media={"max_image_side": max(args.sizes)},
                runners={"generate_url": f"http://127.0.0.1:{free_port()}", "generate_model_path": str(model_dir)},
            )
            (spec,) = [s for s in runner_specs(settings, QWEN3) if s.name == "generate"]
            spec.args += [a for arg in args.runner_arg for a in arg.split(" ", 1)]
            print(f"starting the tiny VL runner: {' '.join(spec.command())}", file=sys.stderr)
            stack.enter_context(running([spec], log_dir=root / "logs", timeout_s=600))
            url = spec.url
        rows = measure(url, args.model, args.sizes, args.rounds)
    print(format_table(rows, args.rounds))


if __name__ == "__main__":
    main()
