"""OCR and rendering throughput, and what OCR costs an indexing job: a scanned PDF against its text-layer twin.

    python -m tests.bench.bench_ocr [--pages 100] [--workers 2] [--json out.json]

- render: PDFium rendering a scanned US Letter page at 300 dpi, greyscale, in this process (pages/s, one core);
- ocr: the same pages read through the OCR worker pool (``RAGSERVE_OCR__WORKERS`` processes), pages/s;
- parse: the indexer's parse stage (:func:`indexer.parsers.parse`) of a ``--pages``-page image-only PDF, and of
  its twin with the same text in a text layer; chunking is the same for both and embedding sees the same text,
  so the difference is OCR's cost for the job. The embedding stage needs a runner and is not measured here.

Pages: 40 lines of 12-point type on a US Letter page (tests/support/ocr_pages.py), 2550 × 3300 pixels at 300 dpi.
Figures in docs/ocr.md.
"""

from __future__ import annotations

import argparse
import os
import time

from indexer.documents import SourceFile
from indexer.ocr import pages
from indexer.ocr.reader import OcrReader
from indexer.parsers import parse
from service.config import OcrSettings
from tests.bench.results import write_json
from tests.support.ocr_pages import PARAGRAPH, cer, image_pdf, text_page
from tests.support.pdf import make_pdf

LINES = PARAGRAPH * 8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json")
    args = parser.parse_args()
    page = text_page(LINES, width_in=8.5, margin_in=0.75)
    scanned = image_pdf([page] * args.pages)
    twin = make_pdf([" ".join(LINES)] * args.pages)
    reader = OcrReader(OcrSettings(workers=args.workers), max_pixels=40_000_000)
    out: dict[str, object] = {"pages": args.pages, "workers": args.workers, "cpus": os.cpu_count(),
                              "page_pixels": f"{page.image.width}x{page.image.height}",
                              "scanned_pdf_bytes": len(scanned), "engine": reader.identity}
    path = f"/tmp/ragserve-bench-ocr-{os.getpid()}.pdf"
    with open(path, "wb") as f:
        f.write(scanned)
    try:
        n = min(args.pages, 20)
        started = time.perf_counter()
        for i in range(n):
            pages.render_pdf_page(path, i, 300, 40_000_000)
        out["render_pages_per_s"] = round(n / (time.perf_counter() - started), 2)
        print(f"render: {out['render_pages_per_s']} pages/s (PDFium, 300 dpi, one process)")

        reader.read_pdf_pages(scanned, [0])  # workers started: their start-up is not a page's cost
        started = time.perf_counter()
        (doc,) = parse(SourceFile("scan.pdf", scanned), reader)
        ocr_s = time.perf_counter() - started
        started = time.perf_counter()
        (twin_doc,) = parse(SourceFile("twin.pdf", twin), reader)
        text_s = time.perf_counter() - started
    finally:
        os.unlink(path)
        reader.close()
    out["ocr_pages_per_s"] = round(args.pages / ocr_s, 3)
    out["parse_scanned_s"] = round(ocr_s, 2)
    out["parse_text_layer_s"] = round(text_s, 3)
    out["ocr_cost_ratio"] = round(ocr_s / text_s, 1)
    out["cer_page_1"] = round(cer(doc.sections[0].text, page.text), 4)
    out["sections"] = [len(doc.sections), len(twin_doc.sections)]
    print(f"parse, {args.pages}-page scanned PDF (render + OCR, {args.workers} workers): {ocr_s:.1f} s = "
          f"{out['ocr_pages_per_s']} pages/s; its text-layer twin: {text_s:.2f} s; {out['ocr_cost_ratio']}x; "
          f"CER of page 1 {out['cer_page_1']:.2%}")
    write_json(args.json, out)


if __name__ == "__main__":
    main()
