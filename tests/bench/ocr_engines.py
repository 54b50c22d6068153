"""OCR engines compared on the generated fixtures: character error rate and seconds per page.

    python -m tests.bench.ocr_engines [--json out.json]

Runs every engine it finds: Tesseract through its command line (Debian's ``tesseract-ocr``) and RapidOCR
(``rapidocr``, ONNX models inside its PyPI package) when importable. It imports only Pillow, the standard
library and the engines, so RapidOCR can be measured from a scratch venv without adding it to ragserve's::

    python3 -m venv /tmp/ocrcmp && /tmp/ocrcmp/bin/pip install rapidocr onnxruntime pillow
    PYTHONPATH=. /tmp/ocrcmp/bin/python -m tests.bench.ocr_engines

The figures are in docs/ocr.md.
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import time
from collections.abc import Callable

from PIL import Image

from tests.bench.results import write_json
from tests.support.ocr_pages import CONDITIONS, cer

Engine = Callable[[Image.Image, int], str]


def tesseract(image: Image.Image, dpi: int) -> str:
    out = io.BytesIO()
    image.save(out, "PNG")
    done = subprocess.run(["tesseract", "stdin", "stdout", "-l", "eng", "--psm", "3", "--dpi", str(dpi)],
                          input=out.getvalue(), capture_output=True, check=True,
                          env={"OMP_THREAD_LIMIT": "1", "PATH": "/usr/bin:/bin"})
    return done.stdout.decode()


def rapidocr() -> Engine | None:
    try:
        from rapidocr import RapidOCR  # type: ignore[import-not-found]
    except ImportError:
        return None
    import numpy as np

    engine = RapidOCR()

    def read(image: Image.Image, dpi: int) -> str:
        result = engine(np.asarray(image.convert("RGB")))
        return " ".join(result.txts or ())

    return read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json")
    args = parser.parse_args()
    engines: dict[str, Engine] = {}
    if shutil.which("tesseract"):
        engines["tesseract"] = tesseract
    rapid = rapidocr()
    if rapid is not None:
        engines["rapidocr"] = rapid
    pages = {name: make() for name, make in CONDITIONS.items()}
    rows: list[dict[str, object]] = []
    for engine_name, engine in engines.items():
        engine(pages["table"].image, 300)  # a warm-up: model loading is not a page's cost
        for condition, page in pages.items():
            started = time.perf_counter()
            text = engine(page.image, page.dpi)
            seconds = time.perf_counter() - started
            rows.append({"engine": engine_name, "condition": condition, "cer": round(cer(text, page.text), 4),
                         "seconds": round(seconds, 3), "megapixels": round(page.image.width * page.image.height / 1e6, 2)})
            print(f"{engine_name:10} {condition:34} CER {rows[-1]['cer']:.2%}  {seconds:6.2f} s  "
                  f"({rows[-1]['megapixels']} MP)")
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
