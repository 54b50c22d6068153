"""``ragserve eval --context`` end to end on a tiny BEIR folder with copies: a live app (its worker indexes the
corpus in token chunks; the embedding runner scripted at the network edge), both methods scored per query."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from service.evaluation.context_eval import evaluate_context
from service.evaluation.copies import build_copies
from service.profiles import MINILM, default_checkpoint
from tests.support.app import API_KEY
from tests.support.scripted_embed import ScriptedEmbedder, scripted_settings
from tests.support.server import live_server

CORPUS = {
    "d1": "Espresso forces hot water through finely ground coffee. The shot takes about twenty five seconds.",
    "d2": "Green tea is steeped at about eighty degrees. Black tea takes boiling water and longer.",
    "d3": "Oolong tea sits between green and black tea. It is rolled and partly oxidised before drying.",
    "d4": "Sourdough bread rises with a wild yeast starter. The dough rests overnight in the cold.",
}
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq2\td3\t1\n"


def test_both_methods_are_scored_on_the_queries_asked_for(tmp_path: Path) -> None:
    src, root = tmp_path / "src", tmp_path / "set"
    (src / "qrels").mkdir(parents=True)
    (src / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n"
                                              for k, v in CORPUS.items()))
    (src / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "how is espresso made"}) + "\n"
                                       + json.dumps({"_id": "q2", "text": "what temperature for tea"}) + "\n")
    (src / "qrels" / "test.tsv").write_text(QRELS)
    copies = build_copies(src, root, share=0.5, seed=3)
    settings = scripted_settings(tmp_path / "data")
    settings.qdrant.edge_process = False
    tokenizer = Path(default_checkpoint(MINILM.embedding)) / "tokenizer.json"
    with live_server(settings, with_worker=True, transports={"embedding": ScriptedEmbedder().transport}) as url:
        every = asyncio.run(evaluate_context(url, API_KEY, root, "kb", tokenizer_file=tokenizer, budget=120,
                                             chunk_tokens=16))
        several = asyncio.run(evaluate_context(url, API_KEY, root, "kb", tokenizer_file=tokenizer, budget=120,
                                               chunk_tokens=16, min_relevant=2))
    assert len(copies) == 2
    assert set(every) == {"plain", "context"} and every["plain"]["queries"] == every["context"]["queries"] == 2
    assert several["plain"]["queries"] == several["context"]["queries"] == 1
    for rows in (every, several):
        assert all(0 < row["tokens_used"] <= 120 for row in rows.values())
        assert rows["plain"]["copies_dropped"] == rows["plain"]["wrongly_dropped"] == 0  # plain packing drops none
