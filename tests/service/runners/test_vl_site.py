"""The torchvision side-install's patch: appended once, only where the compiled ops are missing."""

from __future__ import annotations

from pathlib import Path

from service.runners.vl_site import MARKER, patch_extension


def test_patch_is_appended_once(tmp_path: Path) -> None:
    ext = tmp_path / "torchvision" / "extension.py"
    ext.parent.mkdir()
    ext.write_text("def _has_ops():\n    return False\n")
    assert patch_extension(tmp_path) is True
    assert patch_extension(tmp_path) is False
    text = ext.read_text()
    assert text.count(MARKER) == 1
    assert 'define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")' in text
    assert 'define("qnms(' in text
    compile(text, str(ext), "exec")  # still valid Python
