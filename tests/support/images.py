"""Image files for tests, made on the spot: good rasters and the hostile files ragserve must refuse."""

from __future__ import annotations

import base64
import io
import struct
import zlib

from PIL import Image


def raster(fmt: str, width: int = 64, height: int = 48, color: tuple[int, int, int] = (200, 40, 40),
           mode: str = "RGB") -> bytes:
    image = Image.new(mode, (width, height), color if mode == "RGB" else (*color, 128))
    for x in range(0, width, 8):  # some structure, so encoders and the model see more than a flat colour
        for y in range(0, height, 8):
            if (x + y) % 16 == 0:
                image.putpixel((x, y), (0, 0, 0) if mode == "RGB" else (0, 0, 0, 255))
    out = io.BytesIO()
    image.save(out, fmt)
    return out.getvalue()


def noise_png(side: int, seed: int) -> bytes:
    """A distinct image per seed (so vLLM's caches see a new image each time)."""
    import random

    rng = random.Random(seed)
    image = Image.frombytes("RGB", (side, side), bytes(rng.getrandbits(8) for _ in range(side * side * 3)))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def animated_gif() -> bytes:
    frames = [Image.new("RGB", (32, 32), c) for c in ((255, 0, 0), (0, 0, 255))]
    out = io.BytesIO()
    frames[0].save(out, "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    return out.getvalue()


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def bomb_png(width: int = 20_000, height: int = 20_000) -> bytes:
    """A valid 1-bit PNG of zeros: ~50 kB here, 400 million pixels (1.2 GB as RGB) once decoded."""
    row = b"\x00" + b"\x00" * ((width + 7) // 8)
    compressor = zlib.compressobj(9)
    body = b"".join(compressor.compress(row * 1000) for _ in range(height // 1000)) + compressor.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", body) + _chunk(b"IEND", b"")


SVG = (b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
       b'<image href="http://169.254.169.254/latest/meta-data/"/></svg>')
EPS = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n(/etc/passwd) (r) file\nshowpage\n"
EPS_BINARY = b"\xc5\xd0\xd3\xc6" + b"\x1e\x00\x00\x00" + b"\x00" * 40
WMF = b"\xd7\xcd\xc6\x9a" + b"\x00" * 60
PDF = b"%PDF-1.7\n1 0 obj\n<<>>\nendobj\n"


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"
