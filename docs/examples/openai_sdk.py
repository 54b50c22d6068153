"""The official ``openai`` client, unmodified, against ragserve: embeddings, then a grounded answer streamed
with its citations (ragserve's ``ragserve`` extension goes in ``extra_body``; the citations come in the last
chunk, whose ``choices`` is empty).

    RAGSERVE_URL=http://127.0.0.1:8000 RAGSERVE_API_KEY=... python docs/examples/openai_sdk.py kb "Rotate keys?"

Needs ``pip install openai`` (or ragserve's ``openai`` extra) and, for the answer, a deployment with a
generation model (the qwen3 profile).
"""

from __future__ import annotations

import os
import sys

from openai import OpenAI


def main(argv: list[str]) -> None:
    collection, question = argv
    client = OpenAI(base_url=os.environ.get("RAGSERVE_URL", "http://127.0.0.1:8000") + "/v1",
                    api_key=os.environ["RAGSERVE_API_KEY"])

    embedding = client.embeddings.create(model="ragserve", input=[question]).data[0].embedding
    print(f"embedding: {len(embedding)} dimensions")

    model = client.models.list().data[0].id  # the generation model (LoRA adapters follow it)
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": question}], stream=True, max_tokens=64, temperature=0,
        extra_body={"ragserve": {"collections": [collection], "top_k": 3}},
    )
    citations = []
    for chunk in stream:
        if chunk.choices:
            print(chunk.choices[0].delta.content or "", end="", flush=True)
        extension = (chunk.model_extra or {}).get("ragserve")
        if extension:
            citations = extension["citations"]
    print()
    for c in citations:
        print(f"[{c['number']}] {c['doc_id']}#{c['chunk_index']}{' (cited)' if c['cited'] else ''}")


if __name__ == "__main__":
    main(sys.argv[1:])
