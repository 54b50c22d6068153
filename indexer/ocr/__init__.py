"""OCR: text read from images and from PDF pages without a text layer.

- :mod:`.tesseract`: the engine, Tesseract's command line from Debian's packages (docs/ocr.md says why);
- :mod:`.pages`: what a worker process does with a page: render it (pypdfium2) or decode it (Pillow), then read it;
- :mod:`.pool`: those worker processes, a bounded number, each under an address-space limit, a page cut off at
  its timeout by killing its worker;
- :mod:`.reader`: what the parsers call (:class:`.reader.OcrReader`), and the identity a file's change hash
  includes, so an unchanged file is never read again.
"""
