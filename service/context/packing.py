"""Packing ranked candidates into a context that never passes its token budget.

Candidates are taken best first, except that with ``documents_first`` (the default) a candidate of a document
already in the context that does not meet its passage waits until every candidate of a new document has been
tried: a second, distant chunk of one document costs a passage a new document could have had (docs/context.md
has the figures). Each one, with up to ``neighbours`` chunks before and after it that overlap it
(:mod:`service.context.passages`), is

- ``merged`` into a passage already taken when it overlaps or touches one of its document's section (its
  words are then counted once), or left out as ``merged`` when a taken passage already holds it;
- left out as a ``duplicate`` when it repeats text taken from another document (:mod:`service.context.duplicates`),
  or, when what it adds to its document's passage does; trimmed to its longest run of new sentences when it
  repeats some under the threshold;
- taken as a new passage when it fits; when it does not, it is taken without its neighbours if that fits,
  else, with ``overflow="cut"``, cut at the last sentence boundary that fits (a slice of the source stays a
  slice: its offsets shrink with it), else left out as ``budget``, and later, smaller candidates still try.

The budget is checked while packing with each passage rendered on its own (its number written with as many
digits as the largest can have), and then exactly: the whole context is rendered and counted, and while it is
over, the lowest-scored passage is left out. What is returned is counted, never estimated.

The context lists documents by their best passage (``order="score"``), or with the best documents at both
ends (``order="edges"``: 1st first, 2nd last, 3rd second...: models read the ends of a long prompt best);
a document's passages stay together, in document order. Passages are numbered ``[1]..[n]`` as they appear.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from service.context.duplicates import SENTENCE_END, novel_run, repeated, shingles
from service.context.passages import Candidate, Passage, covers, merge, overlaps, single, span
from service.context.template import SEPARATOR, Template
from service.context.tokens import TokenCounter
from service.store.types import Hit

Order = Literal["score", "edges"]
Overflow = Literal["cut", "skip"]
Reason = Literal["duplicate", "budget", "merged"]


@dataclass(frozen=True)
class Dropped:
    candidate: Candidate
    reason: Reason
    passage: Passage | None = None
    """For ``merged``: the passage that holds it; for ``duplicate``: the one it repeats."""


@dataclass
class _Entry:
    candidate: Candidate
    reason: Reason
    holder: _Taken | None = None


@dataclass
class Packed:
    passages: list[Passage]
    """In context order, numbered."""
    context: str
    tokens: int
    dropped: list[Dropped]


@dataclass(eq=False)
class _Taken:
    passage: Passage
    shingles: frozenset[int]
    absorbed_by: _Taken | None = None
    """Set when a later candidate joined this passage to another one, which holds it now."""

    def current(self) -> _Taken:
        t = self
        while t.absorbed_by is not None:
            t = t.absorbed_by
        return t


@dataclass
class _Run:
    """One packing's state: the passages taken so far and what was left out."""

    number: str
    """Passage numbers are estimated at this width (the widest one the candidates can give)."""
    separator: int
    """Tokens of the separator between two passages."""
    least: int
    """Tokens of one passage's header: less room than this and nothing more can be taken."""
    taken: list[_Taken] = field(default_factory=list)
    owners: list[tuple[Candidate, _Taken]] = field(default_factory=list)
    """Each candidate taken as a passage of its own, and its passage."""
    dropped: list[_Entry] = field(default_factory=list)

    def room(self, budget: int) -> int:
        """Tokens left for one more passage, its separator counted."""
        used = sum(t.passage.tokens for t in self.taken) + self.separator * max(len(self.taken) - 1, 0)
        return budget - used - (self.separator if self.taken else 0)

    def take(self, candidate: Candidate, passage: Passage) -> None:
        placed = _Taken(passage, shingles(passage.text))
        self.taken.append(placed)
        self.owners.append((candidate, placed))


@dataclass(frozen=True)
class PackOptions:
    budget: int
    template: Template
    neighbours: int = 0
    order: Order = "score"
    overflow: Overflow = "cut"
    duplicate_threshold: float = 0.5
    documents_first: bool = True
    """A candidate of a document already in the context that does not meet its passages waits until every
    candidate of a new document has been tried."""
    max_passages: int | None = None
    """Take no more passages than this (a candidate that would make one more is left out as ``budget``)."""


class Packer:
    def __init__(self, counter: TokenCounter, options: PackOptions) -> None:
        self.counter = counter
        self.options = options

    async def min_budget(self) -> int:
        """The tokens of one passage's header: the template rendered with number 1 and no words."""
        return await self.counter.count(self.options.template.render(
            {"number": "1", "title": "", "source": "", "page": "", "text": ""})) + 1

    async def pack(self, candidates: Sequence[Candidate],
                   neighbours: Mapping[tuple[str, str | None, str], Mapping[int, Hit]]) -> Packed:
        """``neighbours``: per document (:func:`service.context.passages.doc_key`), its chunks read for the
        candidates, by chunk index."""
        width = len(str(max(len(candidates), 1)))
        run = _Run(number="9" * width,  # each passage estimated with the widest number it can have
                   separator=await self.counter.count(SEPARATOR), least=await self.min_budget())
        deferred: list[Candidate] = []

        def queue() -> Iterator[tuple[Candidate, bool]]:
            yield from ((c, self.options.documents_first) for c in candidates)
            yield from ((c, False) for c in deferred)  # filled while the first pass runs

        for candidate, may_wait in queue():
            if not await self._place(candidate, may_wait, run, neighbours):
                deferred.append(candidate)  # its document is in already: new documents go first
        return await self._final(run.taken, run.owners, run.dropped)

    async def _place(self, candidate: Candidate, may_wait: bool, run: _Run,
                     neighbours: Mapping[tuple[str, str | None, str], Mapping[int, Hit]]) -> bool:
        """Take, merge or leave out ``candidate`` (recorded in ``run``); False when it waits for a second pass."""
        opts = self.options
        bare = single(candidate)
        same_doc = [t for t in run.taken if t.passage.doc == bare.doc]
        holder = next((t for t in same_doc if covers(t.passage, candidate.hit)), None)
        if holder is not None:
            run.dropped.append(_Entry(candidate, "merged", holder))
            return True
        if may_wait and same_doc and not any(overlaps(t.passage, bare) for t in same_doc):
            return False
        first = self._with_neighbours(bare, candidate, neighbours)
        tries = [first, bare] if len(first.chunks) > 1 else [first]
        fallback = bare
        if not any(overlaps(t.passage, first) for t in same_doc):
            judged = self._unrepeated(first, run.taken, candidate, run.dropped)
            if judged is None:
                return True
            if judged is not first:  # trimmed to the sentences that do not repeat the context
                tries, fallback = [judged], judged
        for attempt in tries:
            grown, meeting = attempt, []
            while True:  # a passage it meets may bring it to the next one
                meets = [t for t in same_doc if t not in meeting and overlaps(t.passage, grown)]
                if not meets:
                    break
                for t in meets:
                    grown, meeting = merge(t.passage, grown), [*meeting, t]
            if not meeting:
                room = run.room(opts.budget)
                if (opts.max_passages is not None and len(run.taken) >= opts.max_passages) or room < run.least:
                    break  # no passage more, or not even a header fits: nothing new can, so nothing is counted
                attempt.tokens = await self._tokens(attempt, run.number)
                if attempt.tokens <= room:
                    run.take(candidate, attempt)
                    return True
                continue
            if self._extends_a_repeat(grown, meeting, run.taken, candidate, run.dropped):
                return True
            grown.tokens = await self._tokens(grown, run.number)
            others = [t for t in run.taken if t not in meeting]
            if sum(t.passage.tokens for t in others) + grown.tokens + run.separator * len(others) <= opts.budget:
                placed = meeting[0]  # it meets passages of its document: they grow into one
                placed.passage, placed.shingles = grown, shingles(grown.text)
                for t in meeting[1:]:
                    t.absorbed_by = placed
                    run.taken.remove(t)
                run.dropped.append(_Entry(candidate, "merged", placed))
                return True
        else:
            full = opts.max_passages is not None and len(run.taken) >= opts.max_passages
            room = run.room(opts.budget)
            if (opts.overflow == "cut" and not full and room >= run.least
                    and not any(overlaps(t.passage, fallback) for t in same_doc)):
                cut = await self._cut(fallback, room, run.number)
                if cut is not None:
                    run.take(candidate, cut)
                    return True
        run.dropped.append(_Entry(candidate, "budget"))
        return True

    def _repeats(self, text: frozenset[int], others: list[_Taken], candidate: Candidate,
                 dropped: list[_Entry]) -> frozenset[int] | None:
        """The shingles of ``text`` that other documents' passages hold, or None when they reach the duplicate
        threshold: ``candidate`` is then recorded in ``dropped`` as a copy of the passage it repeats most."""
        share, matched = repeated(text, (t.shingles for t in others))
        if share < self.options.duplicate_threshold:
            return matched
        copied = max(others, key=lambda t: len(text & t.shingles))
        dropped.append(_Entry(candidate, "duplicate", copied))
        return None

    def _unrepeated(self, group: Passage, taken: list[_Taken], candidate: Candidate,
                    dropped: list[_Entry]) -> Passage | None:
        """``group`` as it may join the context (:mod:`service.context.duplicates`): whole, trimmed to its
        longest run of sentences that passages of other documents do not hold, or None, recorded in ``dropped``,
        when it is a duplicate of them."""
        others = [t for t in taken if t.passage.doc != group.doc]
        if not others:
            return group
        matched = self._repeats(shingles(group.text), others, candidate, dropped)
        if matched is None:
            return None
        if not group.mergeable or group.start is None:
            return group
        own = span(candidate.hit)
        within = None if own is None else (own[0] - group.start, own[1] - group.start)
        run = novel_run(group.text, matched, within)
        if run is None:
            return group
        a, b = run
        start, end = group.start + a, group.start + b
        chunks = [h for h in group.chunks if (s := span(h)) is not None and s[0] < end and start < s[1]]
        return Passage(group.collection, chunks, group.score, group.rerank_score, group.text[a:b],
                       start, end, cut=True)

    def _extends_a_repeat(self, grown: Passage, meeting: list[_Taken], taken: list[_Taken], candidate: Candidate,
                          dropped: list[_Entry]) -> bool:
        """Whether what ``grown`` adds to the passages it meets repeats other documents' passages (recorded in
        ``dropped`` when it does): a chunk that continues its own passage is judged on its new words alone, as a
        candidate of its own would be."""
        assert grown.start is not None and grown.end is not None
        others = [t for t in taken if t.passage.doc != grown.doc]
        if not others:
            return False
        held = sorted((t.passage.start, t.passage.end) for t in meeting
                      if t.passage.start is not None and t.passage.end is not None)
        added: set[int] = set()
        at = grown.start
        for a, b in [*held, (grown.end, grown.end)]:
            if a > at:
                added |= shingles(grown.text[at - grown.start:a - grown.start])
            at = max(at, b)
        return self._repeats(frozenset(added), others, candidate, dropped) is None

    def _with_neighbours(self, bare: Passage, candidate: Candidate,
                         neighbours: Mapping[tuple[str, str | None, str], Mapping[int, Hit]]) -> Passage:
        """The candidate with up to ``neighbours`` chunks each side, each taken only while it overlaps or
        touches what is already there (a neighbour that is not a slice, or from another section, stops it)."""
        n = self.options.neighbours
        if n <= 0 or not bare.mergeable:
            return bare
        chunks = neighbours.get(bare.doc, {})
        grown = bare
        index = candidate.hit.chunk_index
        for step in (-1, 1):
            for k in range(1, n + 1):
                hit = chunks.get(index + step * k)
                if hit is None or span(hit) is None:
                    break
                other = single(Candidate(candidate.collection, hit, candidate.score, candidate.rerank_score))
                if not overlaps(grown, other):
                    break
                grown = merge(grown, other)
        return grown

    async def _tokens(self, passage: Passage, number: str) -> int:
        return await self.counter.count(self.options.template.render(passage.render_values(0) | {
            "number": number}))

    async def _cut(self, passage: Passage, room: int, number: str) -> Passage | None:
        """The longest run of whole sentences from the passage's start that fits ``room`` tokens; None when
        not even its first sentence fits, or the passage is not a slice of its source."""
        if not passage.mergeable or passage.start is None:
            return None
        ends = [m.end() for m in SENTENCE_END.finditer(passage.text)]
        lo, hi, best = 0, len(ends) - 1, None
        while lo <= hi:
            mid = (lo + hi) // 2
            text = passage.text[:ends[mid]]
            cut = Passage(passage.collection, passage.chunks, passage.score, passage.rerank_score, text,
                          passage.start, passage.start + len(text), cut=True)
            cut.tokens = await self._tokens(cut, number)
            if cut.tokens <= room:
                best, lo = cut, mid + 1
            else:
                hi = mid - 1
        return best

    async def _final(self, taken: list[_Taken], owners: list[tuple[Candidate, _Taken]],
                     entries: list[_Entry]) -> Packed:
        """Order, number, render and count exactly; leave out the lowest-scored passage while over budget
        (its candidates, and those merged into it, then count as ``budget``)."""
        kept = list(taken)
        while True:
            ordered = arrange([t.passage for t in kept], self.options.order)
            for number, p in enumerate(ordered, 1):
                p.number = number
            rendered = [self.options.template.render(p.render_values(p.number)) for p in ordered]
            context = SEPARATOR.join(rendered)
            tokens = await self.counter.count(context) if context else 0
            if tokens <= self.options.budget:
                break
            kept.remove(min(kept, key=lambda t: t.passage.score))
        for p, text in zip(ordered, rendered, strict=True):
            p.tokens = await self.counter.count(text)
        dropped = []
        for candidate, owner in owners:
            if owner.current() not in kept:
                dropped.append(Dropped(candidate, "budget"))
        for e in entries:
            holder = e.holder.current() if e.holder is not None else None
            if holder is not None and holder not in kept:
                dropped.append(Dropped(e.candidate, "budget" if e.reason == "merged" else e.reason))
            else:
                dropped.append(Dropped(e.candidate, e.reason, holder.passage if holder is not None else None))
        return Packed(ordered, context, tokens, dropped)


def arrange(passages: Sequence[Passage], order: Order) -> list[Passage]:
    """Documents by their best passage (or best at both ends for ``edges``), each document's passages
    together in document order."""
    by_doc: dict[tuple[str, str | None, str], list[Passage]] = {}
    for p in passages:
        by_doc.setdefault(p.doc, []).append(p)
    docs = sorted(by_doc.values(), key=lambda ps: -max(p.score for p in ps))
    if order == "edges":
        front, back = docs[0::2], docs[1::2]
        docs = front + back[::-1]
    out: list[Passage] = []
    for ps in docs:
        out.extend(sorted(ps, key=lambda p: (p.start if p.start is not None else -1, p.first.chunk_index)))
    return out
