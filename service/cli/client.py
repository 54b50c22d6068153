"""The commands that talk to a running ragserve through :class:`service.client.Client`: index, search,
context, feedback, delete, snapshot, eval and tune-fusion (export and import: :mod:`service.cli.transfer`)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.cli.settings import settings_of

if TYPE_CHECKING:
    from service.client import Client, Job


def api_location(args: argparse.Namespace) -> tuple[str, str]:
    """Where the API is and the key to send: ``--url``/``--api-key``, else ``RAGSERVE_URL``/``RAGSERVE_API_KEY``
    (what the Python client reads). The server's ``RAGSERVE_API_KEYS`` is the server's: never read here."""
    from service.client.api import DEFAULT_URL
    from service.config import check_environment

    check_environment(os.environ)  # a misspelt RAGSERVE_ variable is named here too, as by every command
    url = args.url or os.environ.get("RAGSERVE_URL") or DEFAULT_URL
    key = args.api_key or os.environ.get("RAGSERVE_API_KEY")
    if not key:
        raise SystemExit("ragserve: no API key: pass --api-key or set RAGSERVE_API_KEY (a key the server accepts; "
                         "RAGSERVE_API_KEYS is the server's own list, not read by client commands)")
    return url, key


def connect(args: argparse.Namespace) -> Client:
    from service.client import Client

    url, key = api_location(args)
    return Client(url, key, timeout=600)


def add_api_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default=None, help="the API (default: $RAGSERVE_URL, else http://127.0.0.1:8000)")
    p.add_argument("--api-key", default=None, help="a key the API accepts (default: $RAGSERVE_API_KEY)")


def cmd_index(args: argparse.Namespace) -> None:
    options: dict[str, object] = {"prune": args.prune, "chunking": args.chunking}
    if args.chunk_tokens:
        options["chunk_tokens"] = args.chunk_tokens
    paths = [Path(p) for p in args.paths]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise SystemExit(f"no such file or folder: {', '.join(missing)}")
    prefixes = name_prefixes(paths)
    failed = 0
    with connect(args) as client:
        for path, prefix in zip(paths, prefixes, strict=True):  # one job per path: each its own source
            job = submit(client, path, args.collection, server_path=args.server_path, options=options,
                         include=args.include or [], exclude=args.exclude or [], name_prefix=prefix)
            print(f"job {job.id} submitted for {path}", file=sys.stderr)
            if args.no_wait:
                print(job.id)
                continue
            job = follow(client, job.id, quiet=args.quiet)
            print(summary(job))
            failed += job.state != "succeeded"
    if failed:
        raise SystemExit(1)


def name_prefixes(paths: list[Path]) -> list[str]:
    """Document-id prefixes for several roots indexed side by side: each root's place under the folder that
    holds them all (``docs/``, ``deploy/``), so files of the same name in two roots stay two documents.
    One root keeps ids relative to itself. Roots inside one another are refused."""
    resolved = [p.resolve() for p in paths]
    for i, a in enumerate(resolved):
        for b in resolved[i + 1:]:
            if a == b or a in b.parents or b in a.parents:
                raise SystemExit(f"{a} and {b} overlap: give one or the other")
    if len(resolved) == 1:
        return [""]
    base = Path(os.path.commonpath([p.parent for p in resolved]))
    homes = [p.parent if p.is_file() else p for p in resolved]  # what the source's names are relative to
    return ["" if h == base else h.relative_to(base).as_posix() + "/" for h in homes]


def submit(client: Client, path: Path, collection: str, *, server_path: bool, options: dict[str, Any],
           include: list[str], exclude: list[str], name_prefix: str = "") -> Job:
    """Create the collection when missing and submit one ingest job for ``path`` (without waiting)."""
    client.ensure_collection(collection)
    try:
        return client.ingest_path(collection, path, server_path=server_path, include=include, exclude=exclude,
                                  name_prefix=name_prefix, options=options, wait=False,
                                  on_skip=lambda name, why: print(f"skipped {name}: {why}", file=sys.stderr))
    except ValueError as exc:  # nothing readable under the path
        raise SystemExit(str(exc)) from None


def follow(client: Client, job_id: str, *, quiet: bool = False, poll_s: float = 0.5) -> Job:
    """Poll the job, drawing a progress line, until it ends."""
    def draw(job: Job) -> None:
        print("\r" + _progress_line(job), end="", file=sys.stderr, flush=True)

    job = client.wait_for_job(job_id, progress=None if quiet else draw, poll_s=poll_s)
    if not quiet:
        print(file=sys.stderr)
    return job


def _progress_line(job: Job) -> str:
    c, p = job.counts, job.progress
    total = c.documents_total
    done = c.documents_indexed + c.documents_unchanged + c.documents_failed
    bar = ""
    if p.fraction is not None:
        filled = int(p.fraction * 24)
        bar = "[" + "#" * filled + "-" * (24 - filled) + f"] {p.fraction * 100:5.1f}% "
    rate = f"{p.tokens_per_s:.0f} tok/s" if p.tokens_per_s else "- tok/s"
    eta = f"ETA {p.eta_s:.0f}s" if p.eta_s else ""
    return (f"{job.state:<9} {bar}docs {done}/{total if total is not None else '?'} "
            f"chunks {c.chunks} {rate} {eta}   ")


def summary(job: Job) -> str:
    c = job.counts
    lines = [
        f"job {job.id}: {job.state}" + (f" ({job.message})" if job.message else ""),
        f"  documents: {c.documents_seen} seen, {c.documents_indexed} indexed, "
        f"{c.documents_unchanged} unchanged, {c.documents_failed} failed, {c.documents_deleted} deleted",
        f"  chunks: {c.chunks}" + (f" ({c.chunks_truncated} cut to the model's window)" if c.chunks_truncated else "")
        + f", tokens: {c.tokens}, files failed: {c.files_failed}",
    ]
    if job.progress.elapsed_s:
        rate = f", {job.progress.tokens_per_s:.0f} tokens/s" if job.progress.tokens_per_s else ""
        lines.append(f"  time: {job.progress.elapsed_s:.1f}s{rate}")
    for err in job.errors[:20]:
        lines.append(f"  ! {err.item}: {err.error}")
    if len(job.errors) > 20:
        lines.append(f"  ... and {len(job.errors) - 20} more errors")
    return "\n".join(lines)


def cmd_search(args: argparse.Namespace) -> None:
    with connect(args) as client:
        result = client.search(args.collection, args.query, top_k=args.top_k,
                               rerank=False if args.no_rerank else None)
    if args.json:
        print(result.model_dump_json(indent=2))
        return
    for hit in result.hits:
        where = hit.location or {}
        extra = f" p.{where['page']}" if "page" in where else ""
        extra += f" slide {where['slide']}" if "slide" in where else ""
        extra += f" rows {where['rows'][0]}-{where['rows'][1]}" if where.get("rows") else ""
        extra += f" § {' > '.join(where['headings'])}" if where.get("headings") else ""
        extra += f" [{where['source']}]" if where.get("source") else ""  # read by OCR, or a VL description
        print(f"{hit.rank:>3}. {hit.score:.4f}  {hit.doc_id}#{hit.chunk_index}{extra}")
        print(f"     {hit.text[:160].replace(chr(10), ' ')}")
    print(f"timings (ms): {result.timings_ms}")
    if result.search_id is not None:  # what `ragserve feedback` rates a hit of
        print(f"search_id: {result.search_id}")


def cmd_context(args: argparse.Namespace) -> None:
    """The context on stdout (what a prompt gets); its sources and what was left out on stderr."""
    with connect(args) as client:
        result = client.context(args.collection, args.query, budget_tokens=args.budget,
                                neighbours=args.neighbours, order=args.order,
                                rerank=False if args.no_rerank else None)
    if args.json:
        print(result.model_dump_json(indent=2))
        return
    print(result.context)
    err = sys.stderr
    print(f"\n{result.tokens} tokens ({result.tokenizer}) for {result.query_used!r}", file=err)
    for p in result.passages:
        where = p.location or {}
        span = f" chars {where['char_start']}-{where['char_end']}" if "char_start" in where else ""
        span += f" p.{where['page']}" if "page" in where else ""
        span += f" § {' > '.join(where['headings'])}" if where.get("headings") else ""
        chunks = ",".join(map(str, p.chunk_indexes))
        print(f"[{p.number}] {p.collection}/{p.doc_id}#{chunks}{span}  {p.tokens} tokens", file=err)
    for d in result.dropped:
        into = f" (passage [{d.passage}])" if d.passage is not None else ""
        print(f"left out {d.collection}/{d.doc_id}#{d.chunk_index}: {d.reason}{into}", file=err)
    if result.search_id is not None:
        print(f"search_id: {result.search_id}", file=err)


def cmd_feedback(args: argparse.Namespace) -> None:
    """Rate a hit of a search, context or grounded chat by the search id it printed; the server checks the rest."""
    with connect(args) as client:
        result = client.feedback(args.search_id, chunk_id=args.chunk_id, doc_id=args.doc_id, rating=args.rating,
                                 comment=args.comment)
    if args.json:
        print(result.model_dump_json(indent=2))
        return
    kept = "stored in the query log" if result.stored else "counted; the query log is off, so not stored"
    print(f"rated {result.collection}/{result.doc_id} (chunk {result.chunk_id}): {result.rating}, {kept}")


def cmd_delete(args: argparse.Namespace) -> None:
    """Delete the documents matching a filter; with --dry-run, only say which and how many."""
    try:
        where = json.loads(args.filter) if args.filter else {}
    except ValueError as exc:
        raise SystemExit(f"--filter is not JSON: {exc}") from None
    if not isinstance(where, dict):
        raise SystemExit('--filter must be a JSON object, e.g. \'{"tag": "old"}\'')
    with connect(args) as client:
        result = client.delete_documents(args.collection, filter=where, all=args.all, dry_run=args.dry_run)
    verb = "would delete" if result.dry_run else "deleted"
    print(f"{verb} {result.documents} documents ({result.chunks} chunks) from '{result.collection}'")
    for doc_id in result.doc_ids:
        print(f"  {doc_id}")
    if result.doc_ids_truncated:
        print(f"  ... and {result.documents - len(result.doc_ids)} more")


def cmd_snapshot(args: argparse.Namespace) -> None:
    """Ask the running API for a snapshot (it takes it while it serves), or list the ones it has."""
    with connect(args) as client:
        if args.list:
            listing = client.snapshot_listing()
            taken, unreadable = listing.snapshots, listing.unreadable
        else:
            taken, unreadable = [client.create_snapshot(args.collection)], []
    for snap in taken:
        counts = ", ".join(f"{c.name} {c.points} points" for c in snap.collections) or "no collections"
        print(f"{snap.path}  {snap.created_at}  {counts}  manifest sha256 {snap.manifest_sha256}")
    for broken in unreadable:
        print(f"ragserve: left out {broken.path}: {broken.message} ({broken.code})", file=sys.stderr)


def cmd_optimize_online(args: argparse.Namespace) -> None:
    """``ragserve optimize COLLECTION --online``: the running API builds the index in the background while it
    serves; this polls the collection until the build ended and says how."""
    import time

    with connect(args) as client:
        index = client.build_index(args.collection).index or {}
        shown = None
        while index.get("build") == "running":
            line = _build_progress(index)
            if line != shown:
                print(f"{args.collection}: {line}", file=sys.stderr)
                shown = line
            time.sleep(0.5)
            index = client.get_collection(args.collection).index or {}
    if not index:
        print(f"{args.collection}: the store indexes by itself (a Qdrant server): nothing to start")
        return
    if index.get("build") == "failed":
        raise SystemExit(f"ragserve: the build of {args.collection} was given up: {index.get('reason')}")
    built = f"; last built {index['last_built']} at {index['last_ended']}" if index.get("last_built") else ""
    print(f"{args.collection}: {index['indexed']} points indexed, {index['unindexed']} searched exactly{built}")


def _build_progress(index: dict[str, Any]) -> str:
    """A running build, as the store estimates it: its phase, percent done and time left."""
    done = f" {index['progress']:.0%}" if index.get("progress") is not None else ""
    left = f", about {index['eta_s']:.0f} s left" if index.get("eta_s") is not None else ""
    waiting = f", {index['waiting_writes']} write(s) waiting for it" if index.get("waiting_writes") else ""
    return f"building the index: {index.get('phase')}{done}{left}{waiting}"


def cmd_eval(args: argparse.Namespace) -> None:
    from service.evaluation.dataset import BeirDataset
    from service.evaluation.run import evaluate_service, format_table

    url, key = api_location(args)
    if args.from_log:
        cmd_eval_from_log(args, url, key)
        return
    if args.dataset is None or args.collection is None:
        raise SystemExit("ragserve eval: a dataset and --collection are needed (or --from-log)")
    if args.context:
        cmd_eval_context(args, url, key)
        return
    modes = args.mode or [None]
    reports = asyncio.run(evaluate_service(
        url, key, BeirDataset(Path(args.dataset)), args.collection, split=args.split, modes=modes,
        rerank=args.rerank, progress=not args.json,
    ))
    if args.json:
        print(json.dumps([r.__dict__ for r in reports], indent=2))
    else:
        print(format_table(reports))


def cmd_eval_from_log(args: argparse.Namespace, url: str, key: str) -> None:
    from service.evaluation.dataset import BeirDataset
    from service.evaluation.from_log import evaluate_from_log, format_markdown, parse_config

    try:
        a, b = parse_config(args.a or ""), parse_config(args.b or "")
    except ValueError as exc:
        raise SystemExit(f"ragserve eval --from-log: {exc}") from None
    full = None
    if args.dataset is not None:
        dataset = BeirDataset(Path(args.dataset))
        full = (dataset.qrels(args.split), dataset.queries(args.split))
    from service.cli.querylog import unix_time

    report = asyncio.run(evaluate_from_log(url, key, a=a, b=b, log_key=args.log_key, since=unix_time(args.since),
                                           top_k=args.top_k, full_qrels=full))
    markdown = format_markdown(report)
    out = Path(args.out)
    out.with_suffix(".md").write_text(markdown)
    out.with_suffix(".json").write_text(json.dumps(report.to_dict(), indent=2) + "\n")
    print(json.dumps(report.to_dict(), indent=2) if args.json else markdown)
    print(f"wrote {out.with_suffix('.md')} and {out.with_suffix('.json')}", file=sys.stderr)


def cmd_eval_context(args: argparse.Namespace, url: str, key: str) -> None:
    from service.evaluation.context_eval import evaluate_context
    from service.evaluation.context_metrics import format_context_table
    from service.profiles import default_checkpoint, get_profile

    settings = settings_of(args)
    tokenizer = Path(args.tokenizer_path or settings.runners.embed_model_path
                     or default_checkpoint(get_profile(settings.profile).embedding)) / "tokenizer.json"
    options = {"neighbours": args.neighbours} if args.neighbours is not None else {}
    rows = asyncio.run(evaluate_context(url, key, Path(args.dataset), args.collection, tokenizer_file=tokenizer,
                                        split=args.split, budget=args.budget, chunk_tokens=args.chunk_tokens,
                                        options=options, min_relevant=args.min_relevant))
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(format_context_table(rows))


def cmd_tune_fusion(args: argparse.Namespace) -> None:
    from service.evaluation.dataset import BeirDataset
    from service.evaluation.tuning import tune

    url, key = api_location(args)
    results = asyncio.run(tune(url, key, BeirDataset(Path(args.dataset)), args.collection, split=args.split))
    print(f"nDCG@10 on the {args.split} split, best first:")
    for setting, ndcg in results[: args.top]:
        print(f"  {ndcg:.4f}  {setting}")
    print(f"\nbest: {results[0][0].env()}")



def add_index(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("index", help="index files or folders into a collection, with live progress")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="a file or folder; several are several sources (one job each, --prune per source)")
    p.add_argument("--collection", required=True)
    add_api_options(p)
    p.add_argument("--server-path", action="store_true",
                   help="let the server read PATH itself (it must be under an allowed root); default: upload")
    p.add_argument("--include", action="append", help="glob of files to take (repeatable)")
    p.add_argument("--exclude", action="append", help="glob of files to skip (repeatable)")
    p.add_argument("--prune", action="store_true",
                   help="delete documents of each PATH that are no longer in it")
    p.add_argument("--chunking", choices=["auto", "tokens", "none"], default="auto")
    p.add_argument("--chunk-tokens", type=int, default=None)
    p.add_argument("--no-wait", action="store_true", help="print the job id and exit")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_index)


def add_search(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("search", help="print the top hits for a query")
    p.add_argument("query")
    p.add_argument("--collection", required=True)
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--no-rerank", action="store_true")
    p.add_argument("--json", action="store_true")
    add_api_options(p)
    p.set_defaults(func=cmd_search)


def add_context(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("context", help="print a budgeted, cited context for a question (sources on stderr)")
    p.add_argument("query")
    p.add_argument("--collection", required=True)
    p.add_argument("--budget", type=int, default=1000, help="budget_tokens (default 1000)")
    p.add_argument("--neighbours", type=int, default=None)
    p.add_argument("--order", choices=["score", "edges"], default=None)
    p.add_argument("--no-rerank", action="store_true")
    p.add_argument("--json", action="store_true")
    add_api_options(p)
    p.set_defaults(func=cmd_context)


def add_feedback(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("feedback", help="rate a hit of a search: -1 wrong, 0 not relevant, 1 to 3 relevant")
    p.add_argument("search_id", help="the search_id that search, context or --json printed")
    hit = p.add_mutually_exclusive_group(required=True)
    hit.add_argument("--chunk-id", default=None, help="the hit's id (search --json: hits[].id)")
    hit.add_argument("--doc-id", default=None, help="the hit's document (its best chunk the search returned)")
    p.add_argument("--rating", type=int, required=True, help="-1 wrong, 0 not relevant, 1 to 3 relevant")
    p.add_argument("--comment", default=None, help="free text, kept in the query log with the rating")
    p.add_argument("--json", action="store_true")
    add_api_options(p)
    p.set_defaults(func=cmd_feedback)


def add_delete(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("delete", help="delete every document matching a filter (--dry-run: count them first)")
    p.add_argument("--collection", required=True)
    p.add_argument("--filter", default=None,
                   help='JSON, the search filter language: \'{"tag": "old"}\', \'{"year": {"lt": 2020}}\'')
    p.add_argument("--all", action="store_true", help="delete every document of the collection (no --filter)")
    p.add_argument("--dry-run", action="store_true", help="only say which documents would go, and how many")
    add_api_options(p)
    p.set_defaults(func=cmd_delete)


def add_snapshot(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("snapshot", help="snapshot the store through the running API, while it serves (admin key)")
    p.add_argument("--collection", default=None, help="one collection (default: every one, at one instant)")
    p.add_argument("--list", action="store_true", help="list the snapshots the API has taken instead")
    add_api_options(p)
    p.set_defaults(func=cmd_snapshot)


def add_eval(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("eval", help="evaluate retrieval on a BEIR-layout dataset, or on the query log's rated "
                       "searches (--from-log), through the running API")
    p.add_argument("dataset", nargs="?", help="a BEIR-layout folder (with --from-log: optional, its qrels score "
                   "the same runs in full too)")
    p.add_argument("--collection", help="the collection to evaluate (not with --from-log: the log names it)")
    add_api_options(p)
    p.add_argument("--split", default="test")
    p.add_argument("--mode", action="append", default=None,
                   help="search mode(s) to evaluate: dense, sparse, hybrid, hybrid:rrf, hybrid:dbsf (repeatable)")
    p.add_argument("--rerank", action="store_true")
    p.add_argument("--json", action="store_true")
    p.add_argument("--context", action="store_true",
                   help="evaluate POST /v1/context beside plain packing of /v1/search's hits (docs/context.md)")
    p.add_argument("--budget", type=int, default=512, help="with --context: budget_tokens")
    p.add_argument("--neighbours", type=int, default=None, help="with --context: neighbours (default the server's)")
    p.add_argument("--chunk-tokens", type=int, default=64,
                   help="with --context: chunk size when the collection is indexed here (default 64)")
    p.add_argument("--min-relevant", type=int, default=1,
                   help="with --context: only the queries with at least this many relevant documents")
    p.add_argument("--tokenizer-path", default=None,
                   help="with --context: the checkpoint folder whose tokenizer.json counts plain packing (default "
                        "the embedding model's)")
    p.add_argument("--from-log", action="store_true",
                   help="judge with the query log's feedback and compare --a against --b (docs/quality.md)")
    p.add_argument("--a", default="", help="with --from-log: side A, e.g. mode=dense or collection=old,rerank=false")
    p.add_argument("--b", default="", help="with --from-log: side B, e.g. mode=hybrid,rerank=true")
    p.add_argument("--since", default=None, help="with --from-log: only searches since (Unix seconds or ISO 8601)")
    p.add_argument("--log-key", default=None, help="with --from-log: the key that reads the log (default the API "
                   "key; an admin key reads every tenant's rows, a tenant's key its own)")
    p.add_argument("--top-k", type=int, default=100, help="with --from-log: hits asked of each search")
    p.add_argument("--out", default="eval-from-log", help="with --from-log: write OUT.md and OUT.json")
    p.set_defaults(func=cmd_eval)


def add_tune_fusion(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("tune-fusion", help="grid-search hybrid fusion settings on a training split")
    p.add_argument("dataset")
    p.add_argument("--collection", required=True)
    p.add_argument("--split", default="train")
    p.add_argument("--top", type=int, default=15)
    add_api_options(p)
    p.set_defaults(func=cmd_tune_fusion)
