"""The embedding engines a user would pick instead of a vLLM runner, timed on the texts they are given.

This file is a standalone script: it imports nothing of ragserve and runs with the *peers'* Python (a venv of
its own, ``--peers-python``), so their torch, transformers and ONNX Runtime never enter ragserve's venv:

    PEERS_PYTHON tests/bench/peers.py SPEC.json      # prints one JSON line: the result

``SPEC.json``: ``{"engine": "sentence-transformers" | "fastembed" | "infinity" | "export-onnx", "model": DIR,
"texts": [...], "tokens": N, "batches": [16, 32, 64], "probe": 64, "dtype": "float32"}``. Each engine is
loaded (not timed), warmed up on a few texts, probed on the first ``probe`` texts at each batch size in
``batches``, then timed once on all texts at the best of them: the same "at its best batch" the vLLM runner
gets. ``tokens`` is the texts' token count by ragserve's tokenizer (the same model's), so tokens/s compares
across engines; the first four vectors come back too (``sample``), so the caller can check that every
engine computed the same embeddings. ``export-onnx`` writes ``DIR``'s model as ONNX (``torch.onnx``, last_hidden_state) with its
tokenizer files into ``out``, for FastEmbed, which runs ONNX models only.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Encode = Callable[[list[str], int], Any]


def timed_best(encode: Encode, texts: list[str], batches: list[int], probe: int) -> dict[str, Any]:
    encode(texts[:8], batches[0])  # warm-up: first-call allocations, thread pools
    grid = {}
    for b in batches:
        started = time.perf_counter()
        encode(texts[:probe], b)
        grid[b] = probe / (time.perf_counter() - started)
    best = max(grid, key=grid.__getitem__)
    started = time.perf_counter()
    out = encode(texts, best)
    wall = time.perf_counter() - started
    n = len(out) if not hasattr(out, "shape") else int(out.shape[0])
    assert n == len(texts), f"{n} vectors for {len(texts)} texts"
    return {"batch": best, "wall_s": wall, "docs_per_s": len(texts) / wall,
            "probe_docs_per_s": {str(b): v for b, v in grid.items()},
            "sample": [[float(x) for x in v] for v in out[:4]]}


def torch_info() -> dict[str, Any]:
    import torch

    return {"torch": torch.__version__, "torch_threads": torch.get_num_threads()}


def sentence_transformers(spec: dict[str, Any]) -> dict[str, Any]:
    import sentence_transformers as st
    import torch

    started = time.perf_counter()
    model = st.SentenceTransformer(spec["model"], device="cpu",
                                   model_kwargs={"torch_dtype": getattr(torch, spec.get("dtype", "float32"))})
    load_s = time.perf_counter() - started
    if spec.get("max_seq_length"):
        model.max_seq_length = spec["max_seq_length"]

    def encode(texts: list[str], batch: int) -> Any:
        return model.encode(texts, batch_size=batch, normalize_embeddings=True, convert_to_numpy=True,
                            show_progress_bar=False)

    with torch.inference_mode():
        result = timed_best(encode, spec["texts"], spec["batches"], spec["probe"])
    return {**result, "load_s": load_s, "version": st.__version__, **torch_info()}


def fastembed(spec: dict[str, Any]) -> dict[str, Any]:
    import fastembed as fe
    from fastembed import TextEmbedding
    from fastembed.common.model_description import ModelSource, PoolingType

    name = "ragserve-bench/" + Path(spec["model"]).name
    TextEmbedding.add_custom_model(model=name, pooling=PoolingType.MEAN if spec.get("pooling", "mean") == "mean"
                                   else PoolingType.DISABLED, normalization=True, sources=ModelSource(hf=name),
                                   dim=spec["dims"], model_file="model.onnx")
    started = time.perf_counter()
    model = TextEmbedding(model_name=name, specific_model_path=spec["model"], threads=spec.get("threads"))
    load_s = time.perf_counter() - started
    if spec.get("max_seq_length"):  # FastEmbed cuts at 512 whatever the model's sentence-transformers config says
        model.model.tokenizer.enable_truncation(max_length=spec["max_seq_length"])

    def encode(texts: list[str], batch: int) -> Any:
        return list(model.embed(texts, batch_size=batch))

    import onnxruntime

    result = timed_best(encode, spec["texts"], spec["batches"], spec["probe"])
    return {**result, "load_s": load_s, "version": fe.__version__, "onnxruntime": onnxruntime.__version__,
            "threads": spec.get("threads") or "onnxruntime default (all cores)"}


def infinity(spec: dict[str, Any]) -> dict[str, Any]:
    """Infinity's own batching engine in-process (``AsyncEngineArray``: a queue, dynamic batches of up to
    ``batch_size``), the engine its REST server runs; the texts are submitted at once, as a bulk job does."""
    import asyncio

    import infinity_emb
    from infinity_emb import AsyncEngineArray, EngineArgs

    def engine_for(batch: int) -> Any:
        args = EngineArgs(model_name_or_path=spec["model"], engine="torch", device="cpu", batch_size=batch,
                          model_warmup=False, bettertransformer=False, dtype=spec.get("dtype", "float32"))
        return AsyncEngineArray.from_args([args])[0]

    engines: dict[int, Any] = {}
    loop = asyncio.new_event_loop()
    started = time.perf_counter()
    for b in spec["batches"]:
        engines[b] = engine_for(b)
        loop.run_until_complete(engines[b].astart())
    load_s = time.perf_counter() - started

    def encode(texts: list[str], batch: int) -> Any:
        embeddings, _usage = loop.run_until_complete(engines[batch].embed(sentences=texts))
        return embeddings

    try:
        result = timed_best(encode, spec["texts"], spec["batches"], spec["probe"])
    finally:
        for engine in engines.values():
            loop.run_until_complete(engine.astop())
    return {**result, "load_s": load_s, "version": infinity_emb.__version__, **torch_info()}


def export_onnx(spec: dict[str, Any]) -> dict[str, Any]:
    """The model's encoder as ONNX (inputs input_ids, attention_mask[, token_type_ids]; output
    last_hidden_state, dynamic batch and sequence), with the tokenizer files FastEmbed reads beside it."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    src, out = Path(spec["model"]), Path(spec["out"])
    out.mkdir(parents=True, exist_ok=True)
    model = AutoModel.from_pretrained(src).eval()
    tok = AutoTokenizer.from_pretrained(src)
    sample = tok(["a short sentence", "and a somewhat longer sentence to pad the batch"], padding=True,
                 return_tensors="pt")
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in sample]
    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    axes["last_hidden_state"] = {0: "batch", 1: "sequence"}

    class Encoder(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: Any) -> Any:
            return self.inner(**dict(zip(names, args, strict=True))).last_hidden_state

    started = time.perf_counter()
    torch.onnx.export(Encoder(model), tuple(sample[n] for n in names), str(out / "model.onnx"), input_names=names,
                      output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=17, dynamo=False)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt"):
        if (src / name).is_file():
            shutil.copy(src / name, out / name)
    return {"onnx": str(out / "model.onnx"), "export_s": time.perf_counter() - started, "torch": torch.__version__,
            "bytes": os.path.getsize(out / "model.onnx")}


ENGINES = {"sentence-transformers": sentence_transformers, "fastembed": fastembed, "infinity": infinity,
           "export-onnx": export_onnx}


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    result = ENGINES[spec["engine"]](spec)
    if "texts" in spec and "docs_per_s" in result:
        result["tokens_per_s"] = spec["tokens"] * result["docs_per_s"] / len(spec["texts"])
    result["engine"] = spec["engine"]
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
