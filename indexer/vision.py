"""Pictures described by the generator while a file is indexed (docs/vision.md).

:class:`Vision` takes a parsed document and its file, finds its pictures (:mod:`indexer.pictures`), has each
described (:class:`service.generation.describe.ImageDescriber`: the bulk lane, prefix affinity, greedy, a
deadline per picture) and returns the document with one section per description after its text, with
``location.source: "vision"`` and the picture's ``page`` or ``slide``. The chunker never joins sections, so a
description is a chunk of its own (several, when longer than a chunk).

A description that fails (its deadline passed, the runner is down, the picture cannot be decoded, the job's
``max_images_per_job`` is used up) never fails the file: its text is indexed, the picture is named in the
job's errors as not described, and the document is marked incomplete (:attr:`Described.complete`), which the
pipeline folds into its change hash so that the next run of the job describes it again.

It runs in the pipeline's reader thread; the describer's calls run on the worker's event loop, at most
``bulk_max_inflight`` at a time (the bulk lane's slots: none of a picture's deadline is spent waiting for
one).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from indexer.documents import ParsedDocument, Section
from indexer.pictures import PictureRef, PictureTooLarge, pictures
from service.config import MediaSettings, Settings, VisionSettings
from service.errors import RagserveError
from service.generation.describe import ImageDescriber
from service.media.errors import UnsupportedImageFormat
from service.media.images import ImageLimits, PreparedImage, prepare_image
from service.upstream.generation import GenerationClient

log = logging.getLogger("ragserve.indexer")
EMBEDDED_FORMATS = frozenset({"pdf", "docx", "pptx"})
VISION_LOCATION = "vision"
RESULT_GRACE_S = 5.0
"""How long past a picture's own deadline the reader thread waits for its answer before giving up on it (the
deadline is the runner client's; this only guards the thread against a call that never returns)."""


class JobBudget:
    """Pictures one job may still have described (``max_images_per_job``), across its files."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.left = limit

    def take(self) -> bool:
        if self.left <= 0:
            return False
        self.left -= 1
        return True


@dataclass(frozen=True)
class Described:
    doc: ParsedDocument
    problems: list[str]
    """What the job's errors say about pictures left undescribed (the file itself is indexed)."""
    complete: bool
    """Every picture that should have been described was."""
    described: int = 0


class Vision:
    def __init__(self, describer: ImageDescriber, settings: VisionSettings, media: MediaSettings, *,
                 inflight: int) -> None:
        self.describer = describer
        self.settings = settings
        self.limits = ImageLimits(media.max_image_bytes, media.max_image_pixels, media.max_image_side)
        self.inflight = max(inflight, 1)

    def applies(self, fmt: str) -> bool:
        """Whether files of ``fmt`` have pictures described: image files always, the others when embedded
        pictures are on."""
        return fmt == "image" or (self.settings.embedded_pictures and fmt in EMBEDDED_FORMATS)

    def identity(self, fmt: str) -> str:
        """What a described file's change hash holds besides its bytes: the model, the prompt's version, the
        answer's length, the picture's size, and for embedded pictures which ones are taken."""
        base = f"{self.describer.identity} max-side {self.limits.max_side} max-pixels {self.limits.max_pixels}"
        if fmt == "image":
            return base
        return f"{base} embedded min-side {self.settings.min_side}"

    def budget(self) -> JobBudget:
        return JobBudget(self.settings.max_images_per_job)

    def describe(self, doc: ParsedDocument, fmt: str, data: bytes, budget: JobBudget,
                 loop: asyncio.AbstractEventLoop) -> Described:
        """``doc`` with its pictures' descriptions added. Blocks: call it from the reader thread, never the loop."""
        problems: dict[str, list[str]] = {}
        over_budget = 0
        window: deque[tuple[PictureRef, Future[str]]] = deque()
        found: list[tuple[PictureRef, str]] = []

        def note(ref: PictureRef, reason: str) -> None:
            problems.setdefault(reason, []).append(_where(ref))

        def collect() -> None:
            ref, future = window.popleft()
            try:
                found.append((ref, future.result(timeout=self.describer.timeout_s + RESULT_GRACE_S)))
            except RagserveError as exc:
                note(ref, exc.message)
            except FutureTimeout:
                future.cancel()
                note(ref, f"no description within {self.describer.timeout_s:g}s")
            except Exception as exc:  # noqa: BLE001 - one picture's failure, whatever it is, is that picture's
                note(ref, f"the description failed ({type(exc).__name__})")

        try:
            refs = pictures(fmt, data, doc, embedded=self.settings.embedded_pictures,
                            max_pixels=self.limits.max_pixels, max_side=self.limits.max_side)
            for ref in refs:
                if fmt != "image" and ref.size is not None and min(ref.size) < self.settings.min_side:
                    continue
                if budget.left <= 0:  # counted, not decoded: past the bound a picture costs nothing
                    over_budget += 1
                    continue
                image = self._prepare(ref, fmt, note)
                if image is None:
                    continue
                budget.take()
                if len(window) >= self.inflight:
                    collect()
                window.append((ref, asyncio.run_coroutine_threadsafe(self.describer.describe(image), loop)))
        except Exception as exc:  # noqa: BLE001 - a file whose pictures cannot be listed still has its text
            problems.setdefault(f"its pictures could not be read ({type(exc).__name__}: {exc})", []).append("")
        finally:
            while window:
                collect()
        lines = [_problem(places, reason) for reason, places in problems.items()]
        if over_budget:
            lines.append(f"{over_budget} picture(s) not described: the job reached its bound of "
                         f"{budget.limit} (RAGSERVE_VISION__MAX_IMAGES_PER_JOB)")
        if found:
            doc = _with_descriptions(doc, found)
        return Described(doc, lines, complete=not lines, described=len(found))

    def _prepare(self, ref: PictureRef, fmt: str, note: Callable[[PictureRef, str], None]) -> PreparedImage | None:
        """The picture as the generator gets it, or None (with a note unless it is a vector picture or too
        small to say anything: those are not meant to be described)."""
        try:
            image = prepare_image(ref.load(), self.limits)
        except UnsupportedImageFormat:
            return None
        except PictureTooLarge as exc:
            note(ref, f"too large to describe ({exc})")
            return None
        except RagserveError as exc:
            note(ref, exc.message)
            return None
        except Exception as exc:  # noqa: BLE001 - a picture a library cannot decode is that picture's problem
            note(ref, f"cannot be decoded ({type(exc).__name__})")
            return None
        if fmt != "image" and min(image.source_width, image.source_height) < self.settings.min_side:
            return None
        return image


def _with_descriptions(doc: ParsedDocument, found: list[tuple[PictureRef, str]]) -> ParsedDocument:
    """The descriptions after the document's text, one section each, in the pictures' order."""
    parts = [doc.full_text] if doc.full_text else []
    offset = len(doc.full_text) + 1 if doc.full_text else 0
    sections = list(doc.sections)
    for ref, text in found:
        location = {k: v for k, v in ref.location.items() if k != "page"}
        location["source"] = VISION_LOCATION
        sections.append(Section(text, offset, page=ref.location.get("page"), location=location))
        parts.append(text)
        offset += len(text) + 1
    return dataclasses.replace(doc, sections=sections, full_text="\n".join(parts))


def _where(ref: PictureRef) -> str:
    loc = ref.location
    bits = [f"{k} {loc[k]}" for k in ("page", "slide", "picture") if k in loc]
    return ", ".join(bits) or "the image"


def _problem(places: list[str], reason: str) -> str:
    named = [p for p in places if p]
    if not named:
        return f"pictures not described: {reason}"
    shown = "; ".join(named[:5]) + (f"; and {len(named) - 5} more" if len(named) > 5 else "")
    noun = "picture" if len(named) == 1 else "pictures"
    return f"{noun} not described ({shown}): {reason}"


def vision_from_settings(settings: Settings, generator: GenerationClient | None) -> Vision | None:
    """The describer a worker runs with: ``enabled`` auto describes when there is a generator, on insists on
    one (a worker without it refuses to start), off never describes."""
    vs = settings.vision
    if vs.enabled == "off":
        return None
    if generator is None:
        if vs.enabled == "on":
            raise ValueError("RAGSERVE_VISION__ENABLED=on needs a generator: use the qwen3 profile or set "
                             "RAGSERVE_GENERATION__MODEL (and RAGSERVE_RUNNERS__GENERATE_URL)")
        return None
    describer = ImageDescriber(generator, max_tokens=vs.max_tokens, timeout_s=vs.timeout_s)
    return Vision(describer, vs, settings.media, inflight=settings.upstream.bulk_max_inflight)
