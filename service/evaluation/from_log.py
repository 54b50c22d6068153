"""``ragserve eval --from-log``: the query log's rated searches as a judged set, and two configurations of the
running service compared on it.

**The judged set.** Every logged search that kept its query text, searched one collection and was rated: a
rating of 1 to 3 makes the document relevant at that grade, -1 or 0 judged not relevant, and a document nobody
rated is unjudged. Searches of the same text in the same collection are one query; where a document was rated
more than once, the latest rating counts. Rows that keep only the query's HMAC cannot be searched again and are
counted as skipped.

**The measure.** nDCG@10 over judged documents only (``judged_docs_only`` in trec_eval): each side's ranking (its
documents in the order of their best chunk) is cut to the documents that have a judgment, then scored with the
grade as the gain and the judged grades' ideal order. Feedback judges a few documents of each query, so an
unjudged hit cannot count as a miss; how many of each side's top 10 were unjudged is reported beside it. The mean
is over the queries with at least one relevant judgment (a query with only negative ones scores 0 on any side).
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from service.evaluation.metrics import Qrels, Run, evaluate

K = 10
CONFIG_KEYS = {"mode", "rerank", "fusion", "collection", "instruction"}


@dataclass(frozen=True)
class Judgment:
    query_id: str
    query: str
    collection: str
    doc_id: str
    rating: int


@dataclass
class JudgedQuery:
    id: str
    """The first rated search of this text: stable for a given log."""
    query: str
    collection: str
    ratings: dict[str, int] = field(default_factory=dict)
    rated_at: dict[str, float] = field(default_factory=dict)

    def grades(self) -> dict[str, int]:
        """trec_eval's qrels: the rating as the grade, 0 for a rating of -1 or 0 (judged, not relevant)."""
        return {doc: max(rating, 0) for doc, rating in self.ratings.items()}


@dataclass
class Skipped:
    hashed: int = 0
    """Rated rows that keep only the query's HMAC."""
    several_collections: int = 0
    """Rated /v1/context rows over several collections."""


def judged_set(rows: list[dict[str, Any]]) -> tuple[list[JudgedQuery], Skipped]:
    """The judged queries of /v1/querylog rows (as it returns them, oldest first)."""
    queries: dict[tuple[str, str], JudgedQuery] = {}
    skipped = Skipped()
    for row in rows:
        if not row["feedback"]:
            continue
        if row["query"] is None:
            skipped.hashed += 1
            continue
        if len(row["collections"]) != 1:
            skipped.several_collections += 1
            continue
        (collection,) = row["collections"]
        q = queries.setdefault((collection, row["query"]), JudgedQuery(row["search_id"], row["query"], collection))
        for f in row["feedback"]:
            if f["created_at"] >= q.rated_at.get(f["doc_id"], -math.inf):
                q.ratings[f["doc_id"]] = f["rating"]
                q.rated_at[f["doc_id"]] = f["created_at"]
    return list(queries.values()), skipped


def judgments(queries: list[JudgedQuery]) -> list[Judgment]:
    return [Judgment(q.id, q.query, q.collection, doc, rating)
            for q in queries for doc, rating in sorted(q.ratings.items())]


def parse_config(spec: str) -> dict[str, Any]:
    """``mode=hybrid,rerank=true`` -> search options. Keys: mode, rerank, fusion, collection, instruction."""
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key not in CONFIG_KEYS:
            raise ValueError(f"{part!r}: expected key=value with key one of {sorted(CONFIG_KEYS)}")
        if key == "rerank":
            if value.lower() not in ("true", "false"):
                raise ValueError(f"rerank={value!r}: true or false")
            out[key] = value.lower() == "true"
        else:
            out[key] = value
    return out


def judged_ndcg(ranking: list[str], grades: dict[str, int], k: int = K) -> float:
    """nDCG@k of ``ranking`` (document ids, best first) with its unjudged documents removed."""
    condensed = [d for d in ranking if d in grades][:k]
    dcg = sum(grades[d] / math.log2(i + 2) for i, d in enumerate(condensed))
    ideal = sorted(grades.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def unjudged(ranking: list[str], grades: dict[str, int], k: int = K) -> int:
    return sum(d not in grades for d in ranking[:k])


def documents(hits: list[dict[str, Any]]) -> list[str]:
    """The documents of a hit list in the order of their best chunk."""
    return list(dict.fromkeys(h["doc_id"] for h in hits))


def as_run(rankings: dict[str, list[str]]) -> Run:
    """Rankings as trec_eval's run: strictly decreasing scores, so its tie order never applies."""
    return {q: {d: 1.0 / (i + 1) for i, d in enumerate(docs)} for q, docs in rankings.items()}


@dataclass
class Side:
    name: str
    config: dict[str, Any]
    ndcg: float
    """Mean judged-only nDCG@10 over the queries with a relevant judgment."""
    per_query: dict[str, float]
    unjudged_at_10: int
    """Unjudged documents in this side's top 10s, all queries together."""
    rankings: dict[str, list[str]]
    full_qrels_ndcg: float | None = None
    """With a BEIR dataset: ``ragserve eval``'s nDCG@10 of the same runs against the dataset's full qrels."""


@dataclass
class FromLogReport:
    judgments: list[Judgment]
    queries: int
    scored_queries: int
    skipped: Skipped
    a: Side
    b: Side
    wins: list[str]
    """Queries where B scored higher than A."""
    losses: list[str]
    ties: int

    def to_dict(self) -> dict[str, Any]:
        """Everything, each side's rankings included (the runs the figures were computed on)."""
        return asdict(self)


async def read_log(http: httpx.AsyncClient, *, since: float | None = None) -> list[dict[str, Any]]:
    """Every /v1/querylog row the key may read, page by page."""
    rows: list[dict[str, Any]] = []
    after = None
    while True:
        params = {k: v for k, v in {"since": since, "after": after, "limit": 1000}.items() if v is not None}
        r = await http.get("/v1/querylog", params=params)
        r.raise_for_status()
        page = r.json()
        rows += page["rows"]
        after = page["next_after"]
        if after is None:
            return rows


async def search_side(http: httpx.AsyncClient, queries: list[JudgedQuery], config: dict[str, Any], *,
                      top_k: int, concurrency: int = 4) -> dict[str, list[str]]:
    slots = asyncio.Semaphore(concurrency)
    out: dict[str, list[str]] = {}

    async def one(q: JudgedQuery) -> None:
        body: dict[str, Any] = {"collection": config.get("collection", q.collection), "query": q.query,
                                "top_k": top_k}
        for key in ("mode", "fusion", "instruction"):
            if key in config:
                body[key] = config[key]
        if "rerank" in config:
            body["rerank"] = {"enabled": config["rerank"]}
        async with slots:
            r = await http.post("/v1/search", json=body)
        r.raise_for_status()
        out[q.id] = documents(r.json()["hits"])

    await asyncio.gather(*(one(q) for q in queries))
    return out


def score_side(name: str, config: dict[str, Any], queries: list[JudgedQuery],
               rankings: dict[str, list[str]]) -> Side:
    scored = [q for q in queries if any(g > 0 for g in q.grades().values())]
    per_query = {q.id: judged_ndcg(rankings[q.id], q.grades()) for q in scored}
    mean = sum(per_query.values()) / len(per_query) if per_query else 0.0
    missing = sum(unjudged(rankings[q.id], q.grades()) for q in queries)
    return Side(name, config, mean, per_query, missing, rankings)


async def evaluate_from_log(url: str, api_key: str, *, a: dict[str, Any], b: dict[str, Any],
                            log_key: str | None = None, since: float | None = None, top_k: int = 100,
                            full_qrels: tuple[Qrels, dict[str, str]] | None = None,
                            timeout_s: float = 300.0) -> FromLogReport:
    """``full_qrels``: a BEIR split's qrels and queries (id -> text): the same runs are also scored against them,
    for the queries whose text is one of the split's."""
    headers = {"Authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout_s) as http:
        if log_key is not None and log_key != api_key:
            async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {log_key}"},
                                         timeout=timeout_s) as log_http:
                rows = await read_log(log_http, since=since)
        else:
            rows = await read_log(http, since=since)
        queries, skipped = judged_set(rows)
        ra = await search_side(http, queries, a, top_k=top_k)
        rb = await search_side(http, queries, b, top_k=top_k)
    side_a, side_b = score_side("A", a, queries, ra), score_side("B", b, queries, rb)
    if full_qrels is not None:
        qrels, texts = full_qrels
        by_text = {text: qid for qid, text in texts.items()}
        matched = {q.id: by_text[q.query] for q in queries if q.query in by_text}
        subset = {matched[q]: qrels[matched[q]] for q in matched}
        for side in (side_a, side_b):
            if subset:
                run = as_run({matched[q]: side.rankings[q] for q in matched})
                side.full_qrels_ndcg = evaluate(subset, run)["ndcg@10"]
    wins = [q for q in side_a.per_query if side_b.per_query[q] > side_a.per_query[q] + 1e-12]
    losses = [q for q in side_a.per_query if side_b.per_query[q] < side_a.per_query[q] - 1e-12]
    return FromLogReport(judgments(queries), len(queries), len(side_a.per_query), skipped, side_a, side_b, wins,
                         losses, len(side_a.per_query) - len(wins) - len(losses))


def _config_text(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={json.dumps(v) if isinstance(v, bool) else v}" for k, v in config.items()) or "defaults"


def format_markdown(report: FromLogReport) -> str:
    a, b = report.a, report.b
    lines = [
        "# Evaluation from the query log",
        "",
        f"- Judged queries: {report.queries} ({report.scored_queries} with a relevant judgment, scored); "
        f"judgments: {len(report.judgments)}.",
        f"- Skipped rated rows: {report.skipped.hashed} hashed, {report.skipped.several_collections} over several "
        "collections.",
        "",
        "| side | configuration | nDCG@10 (judged only) | unjudged in top 10 | nDCG@10 (full qrels) |",
        "|---|---|---:|---:|---:|",
    ]
    for side in (a, b):
        full = "" if side.full_qrels_ndcg is None else f"{side.full_qrels_ndcg:.4f}"
        lines.append(f"| {side.name} | {_config_text(side.config)} | {side.ndcg:.4f} | {side.unjudged_at_10} | "
                     f"{full} |")
    lines += ["", f"B against A, per query: {len(report.wins)} wins, {len(report.losses)} losses, {report.ties} "
              "ties.", ""]
    changed = [(q, "win") for q in report.wins] + [(q, "loss") for q in report.losses]
    if changed:
        text = {j.query_id: j.query for j in report.judgments}
        lines += ["| query | A | B | |", "|---|---:|---:|---|"]
        for q, verdict in sorted(changed, key=lambda c: b.per_query[c[0]] - a.per_query[c[0]]):
            shown = text[q].replace("|", "\\|")[:80]
            lines.append(f"| {shown} | {a.per_query[q]:.4f} | {b.per_query[q]:.4f} | {verdict} |")
    return "\n".join(lines) + "\n"
