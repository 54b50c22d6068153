"""The issue's done-when, as a user does it: a folder holding a scanned PDF, a mixed PDF, a PNG, a JPEG and a
multi-page TIFF is indexed by ``ragserve index`` (every file succeeds), and ``ragserve search`` finds each phrase
drawn in them on the right file and page, the hit saying its text was read by OCR. Live API and worker, the live
MiniLM runner, the embedded store."""

from __future__ import annotations

import re
from pathlib import Path

from service.config import Settings
from tests.support.cli import ragserve
from tests.support.ocr_pages import PARAGRAPH, encoded, image_pdf, mixed_pdf, multipage_tiff, text_page
from tests.support.server import live_server

LAYER = "The annual report lists every harbor fee."
# phrase: (file, page or None, how the hit says it was read)
PHRASES = {
    "The lighthouse keeper logs barometric pressure at dawn.": ("scan.pdf", 2, "[ocr]"),
    "Seven violins rest inside the museum glass cabinet.": ("mixed.pdf", 2, "[ocr]"),
    LAYER: ("mixed.pdf", 1, ""),
    "Error 4012: the printer queue refused the invoice batch.": ("screen.png", None, "[ocr]"),
    "Fresh basil grows on the sunny kitchen windowsill.": ("photo.jpg", None, "[ocr]"),
    "The glacier retreated forty meters during the summer.": ("pages.tiff", 2, "[ocr]"),
}



def test_a_folder_of_scans_indexes_and_each_phrase_is_found_on_its_page(minilm_settings: Settings,
                                                                       tmp_path: Path) -> None:
    folder = tmp_path / "scans"
    folder.mkdir()
    by_file = {spec[0]: phrase for phrase, spec in PHRASES.items() if spec[2]}
    (folder / "scan.pdf").write_bytes(image_pdf([text_page(PARAGRAPH), text_page((by_file["scan.pdf"],))]))
    (folder / "mixed.pdf").write_bytes(mixed_pdf(LAYER, text_page((by_file["mixed.pdf"],))))
    (folder / "screen.png").write_bytes(encoded(text_page((by_file["screen.png"],)), "PNG"))
    (folder / "photo.jpg").write_bytes(encoded(text_page((by_file["photo.jpg"],)), "JPEG", quality=85))
    (folder / "pages.tiff").write_bytes(multipage_tiff([text_page(("Quarterly tax forms are due in March.",)),
                                                        text_page((by_file["pages.tiff"],))]))
    minilm_settings.indexer.poll_s = 0.05
    with live_server(minilm_settings, with_worker=True) as url:
        indexed = ragserve("index", str(folder), "--collection", "scans", "--quiet", url=url)
        found = {phrase: ragserve("search", phrase, "--collection", "scans", "--top-k", "1", url=url)
                 for phrase in PHRASES}

    assert indexed.returncode == 0, indexed.stdout + indexed.stderr
    assert "succeeded" in indexed.stdout and "5 seen, 5 indexed" in indexed.stdout, indexed.stdout
    for phrase, (file, page, read) in PHRASES.items():
        assert found[phrase].returncode == 0, found[phrase].stderr
        top = found[phrase].stdout.splitlines()[0]
        # "  1. 0.8123  scan.pdf#1 p.2 [ocr]": the file, its page, and how its text was read
        tail = (f" p.{page}" if page else "") + (f" {read}" if read else "")
        assert re.fullmatch(rf" +1\. \S+ +{re.escape(file)}#\d+{re.escape(tail)}", top), (phrase, top)
