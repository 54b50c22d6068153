"""The store folder's marker: the layout and engine versions every opening checks (the server's preflight, the
store process, ``ragserve optimize``), and what each refusal says."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from service import __version__
from service.config import Settings
from service.server import preflight
from service.store.edge import EdgeStore
from service.store.edge_optimize import optimize_collection
from service.store.errors import LegacyStoreLayout, StoreLayoutOutdated, StoreLayoutTooNew
from service.store.layout import LAYOUT, MARKER, MIGRATIONS, engine_version, migrate_command
from service.store.proxy import ProcessStore
from service.store.types import Chunk

LAYOUT1 = {"engine": "qdrant-edge", "layout": 1}


async def make_store(root: Path) -> None:
    """A real store with one small collection, closed again."""
    store = await EdgeStore.open(root)
    try:
        await store.create_collection("kb", dimensions=4, model="m")
        await store.upsert("kb", [Chunk(f"d{i}", 0, f"t{i}", {}) for i in range(6)],
                           [[float(i % 4 == j) for j in range(4)] for i in range(6)])
    finally:
        await store.aclose()


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def write_marker(root: Path, marker: dict[str, object]) -> None:
    (root / MARKER).write_text(json.dumps(marker))


def newer(version: str) -> str:
    major, minor = Version(version).release[:2]
    return f"{major}.{minor + 1}.0"


async def test_a_new_folder_gets_the_current_marker_and_opens_again(tmp_path: Path) -> None:
    root = tmp_path / "qdrant"
    await make_store(root)
    assert json.loads((root / MARKER).read_text()) == {
        "engine": "qdrant-edge", "layout": 2, "engine_version": engine_version(), "ragserve_version": __version__}
    before = snapshot(root)
    store = await EdgeStore.open(root)
    try:
        assert await store.count("kb") == 6
    finally:
        await store.aclose()
    assert (root / MARKER).read_bytes() == before[MARKER]  # a current marker is not rewritten


def test_every_layout_before_the_current_one_has_a_migration_step() -> None:
    assert LAYOUT == 2 and len(MIGRATIONS) == LAYOUT - 1


@pytest.mark.parametrize("marker", [LAYOUT1, {"engine": "qdrant-edge"}], ids=["layout-1", "no-layout-key"])
async def test_a_layout_1_folder_is_refused_with_the_command_that_migrates_it(
        tmp_path: Path, marker: dict[str, object]) -> None:
    root = tmp_path / "qdrant"
    await make_store(root)
    write_marker(root, marker)
    before = snapshot(root)
    expected = (f"the store folder {root} has layout 1; this ragserve reads layout 2. Nothing in it was changed. "
                "With the store closed (no serve, worker or optimize on it), migrate it: "
                f"ragserve store migrate --data-dir {tmp_path} (it first copies the folder to a verified backup "
                "beside it)")
    with pytest.raises(StoreLayoutOutdated) as exc:
        await EdgeStore.open(root)
    assert exc.value.message == expected
    with pytest.raises(StoreLayoutOutdated):
        preflight(Settings(data_dir=tmp_path))
    with pytest.raises(StoreLayoutOutdated):
        optimize_collection(root, "kb")
    with pytest.raises(StoreLayoutOutdated) as exc:
        await ProcessStore.open(root)  # the production default: the store in its own process
    assert exc.value.message == expected
    assert snapshot(root) == before


def test_the_command_for_a_folder_outside_a_data_dir_names_it_through_its_setting(tmp_path: Path) -> None:
    assert migrate_command(tmp_path / "data dir" / "qdrant") == \
        f"ragserve store migrate --data-dir '{tmp_path}/data dir'"
    assert migrate_command(tmp_path / "vectors") == \
        f"RAGSERVE_QDRANT__PATH={tmp_path}/vectors ragserve store migrate"


def test_serve_refuses_a_layout_1_folder_with_the_message_not_a_traceback(tmp_path: Path) -> None:
    asyncio.run(make_store(tmp_path / "qdrant"))
    write_marker(tmp_path / "qdrant", LAYOUT1)
    r = subprocess.run([sys.executable, "-m", "service.cli", "serve", "--data-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=60, env={"RAGSERVE_API_KEYS": "k" * 20, "PATH": ""})
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"migrate it: ragserve store migrate --data-dir {tmp_path} (" in r.stderr


async def test_a_newer_layout_is_refused_naming_both_versions(tmp_path: Path) -> None:
    root = tmp_path / "qdrant"
    await make_store(root)
    write_marker(root, {"engine": "qdrant-edge", "layout": 3, "engine_version": "9.0.0", "ragserve_version": "7.1.0"})
    before = snapshot(root)
    with pytest.raises(StoreLayoutTooNew) as exc:
        await EdgeStore.open(root)
    assert exc.value.message == (f"the store folder {root} was written by ragserve 7.1.0 with layout 3; this ragserve "
                                 "reads layout 2: upgrade ragserve. Nothing in it was changed.")
    with pytest.raises(StoreLayoutTooNew):
        preflight(Settings(data_dir=tmp_path))
    assert snapshot(root) == before


async def test_a_newer_engine_version_is_refused_naming_both(tmp_path: Path) -> None:
    root = tmp_path / "qdrant"
    await make_store(root)
    installed = engine_version()
    write_marker(root, {"engine": "qdrant-edge", "layout": 2, "engine_version": newer(installed),
                        "ragserve_version": "7.1.0"})
    before = snapshot(root)
    with pytest.raises(StoreLayoutTooNew) as exc:
        await EdgeStore.open(root)
    assert exc.value.message == (
        f"the store folder {root} was written by ragserve 7.1.0 with qdrant-edge-py {newer(installed)}; this "
        f"ragserve reads the files of qdrant-edge-py {installed} and older (the engine installed): upgrade ragserve. "
        "Nothing in it was changed.")
    with pytest.raises(StoreLayoutTooNew):
        optimize_collection(root, "kb")
    assert snapshot(root) == before


async def test_an_older_engine_version_is_accepted_and_the_marker_updated(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "qdrant"
    await make_store(root)
    installed = engine_version()
    assert Version(installed) > Version("0.8.0")
    write_marker(root, {"engine": "qdrant-edge", "layout": 2, "engine_version": "0.8.0", "ragserve_version": "0.0.9"})
    preflight(Settings(data_dir=tmp_path))  # the preflight only reads
    assert json.loads((root / MARKER).read_text())["engine_version"] == "0.8.0"
    with caplog.at_level(logging.WARNING, logger="ragserve.store"):
        store = await EdgeStore.open(root)
    try:
        assert await store.count("kb") == 6
    finally:
        await store.aclose()
    assert json.loads((root / MARKER).read_text()) == {
        "engine": "qdrant-edge", "layout": 2, "engine_version": installed, "ragserve_version": __version__}
    assert [r.getMessage() for r in caplog.records] == [
        f"store folder {root}: written by qdrant-edge-py 0.8.0, opened with qdrant-edge-py {installed}; its marker "
        f"now names {installed}"]


@pytest.mark.parametrize(("content", "why"), [
    ("{not json", "its marker ragserve-store.json is not JSON"),
    ('["qdrant-edge"]', "its marker ragserve-store.json is not a JSON object"),
    ('{"engine": "qdrant-edge", "layout": 2}', "its layout-2 marker has no valid engine_version (None)"),
    ('{"engine": "qdrant-edge", "layout": "2"}', "its marker's layout '2' is not a layout number"),
])
async def test_a_damaged_marker_is_refused_and_left_as_it_is(tmp_path: Path, content: str, why: str) -> None:
    root = tmp_path / "qdrant"
    await make_store(root)
    (root / MARKER).write_text(content)
    before = snapshot(root)
    with pytest.raises(LegacyStoreLayout) as exc:
        await EdgeStore.open(root)
    assert exc.value.message.startswith(f"the store folder {root} cannot be opened: {why}")
    assert snapshot(root) == before
