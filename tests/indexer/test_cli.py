"""``ragserve index`` and ``ragserve search`` as a user runs them, against the live API with its worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from service.config import Settings
from tests.support.app import API_KEY
from tests.support.cli import ragserve
from tests.support.server import live_server


def test_index_shows_progress_and_summary_then_search(minilm_settings: Settings, tmp_path: Path) -> None:
    folder = tmp_path / "kb"
    (folder / "sub").mkdir(parents=True)
    (folder / "espresso.md").write_text("# Coffee\n## Espresso\nEspresso forces hot water through fine coffee.\n")
    (folder / "sub" / "tea.txt").write_text("Green tea is steeped at about eighty degrees.")
    (folder / "skip.log").write_text("not wanted")
    minilm_settings.indexer.poll_s = 0.05
    with live_server(minilm_settings, with_worker=True) as url:
        first = ragserve("index", str(folder), "--collection", "kb", "--exclude", "*.log", url=url)
        again = ragserve("index", str(folder), "--collection", "kb", "--exclude", "*.log", url=url)
        found = ragserve("search", "how is espresso made", "--collection", "kb", url=url)
    assert first.returncode == 0, first.stderr
    assert "succeeded" in first.stdout and "2 seen, 2 indexed" in first.stdout
    assert "docs 2/2" in first.stderr and "[####" in first.stderr  # the live progress bar
    assert again.returncode == 0 and "2 unchanged" in again.stdout
    assert found.returncode == 0, found.stderr
    top = found.stdout.splitlines()[0]
    assert "espresso.md#0" in top and "Coffee > Espresso" in top


def test_several_paths_are_several_sources_and_prune_per_source(minilm_settings: Settings, tmp_path: Path) -> None:
    docs, deploy = tmp_path / "docs", tmp_path / "deploy"
    docs.mkdir()
    deploy.mkdir()
    (docs / "README.md").write_text("# Docs\nHow to write the user guide.\n")
    (docs / "old.md").write_text("# Old\nA page about the retired fax gateway.\n")
    (deploy / "README.md").write_text("# Deploy\nHow to run the service on Kubernetes.\n")
    minilm_settings.indexer.poll_s = 0.05
    with live_server(minilm_settings, with_worker=True) as url:
        first = ragserve("index", str(docs), str(deploy), "--collection", "kb", "--quiet", url=url)
        (docs / "old.md").unlink()
        pruned = ragserve("index", str(docs), str(deploy), "--collection", "kb", "--prune", "--quiet", url=url)
        found = ragserve("search", "how to", "--collection", "kb", "--json", "--top-k", "10", url=url)
        nested = ragserve("index", str(tmp_path), str(docs), "--collection", "kb", url=url)
        missing = ragserve("index", str(docs), str(tmp_path / "nope"), "--collection", "kb", url=url)
    assert first.returncode == 0, first.stderr
    assert first.stdout.count(": succeeded") == 2 and "2 seen, 2 indexed" in first.stdout
    assert "1 seen, 1 indexed" in first.stdout
    assert pruned.returncode == 0, pruned.stderr
    summaries = pruned.stdout.split("job ")[1:]
    assert "1 unchanged, 0 failed, 1 deleted" in summaries[0]  # docs/ lost old.md
    assert "1 unchanged, 0 failed, 0 deleted" in summaries[1]  # deploy/ is its own source: nothing pruned
    hits = {h["doc_id"] for h in json.loads(found.stdout)["hits"]}
    assert hits == {"docs/README.md", "deploy/README.md"}  # same file name in two roots: two documents
    assert nested.returncode != 0 and "overlap" in nested.stderr
    assert missing.returncode != 0 and "no such file or folder" in missing.stderr


def test_delete_by_filter_dry_run_then_delete(minilm_settings: Settings, tmp_path: Path) -> None:
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "old.md").write_text("# Old\nThe retired fax gateway.\n")
    (folder / "new.md").write_text("# New\nThe chat gateway.\n")
    minilm_settings.indexer.poll_s = 0.05
    with live_server(minilm_settings, with_worker=True) as url:
        indexed = ragserve("index", str(folder / "old.md"), "--collection", "kb", "--quiet", url=url)
        ragserve("index", str(folder / "new.md"), "--collection", "kb", "--quiet", url=url)
        where = json.dumps({"title": "Old"})
        dry = ragserve("delete", "--collection", "kb", "--filter", where, "--dry-run", url=url)
        still = ragserve("search", "gateway", "--collection", "kb", "--json", url=url)
        done = ragserve("delete", "--collection", "kb", "--filter", where, url=url)
        left = ragserve("search", "gateway", "--collection", "kb", "--json", url=url)
        empty = ragserve("delete", "--collection", "kb", url=url)
        not_json = ragserve("delete", "--collection", "kb", "--filter", "{tag: old}", url=url)
        unknown = ragserve("search", "x", "--collection", "nope", url=url)
    assert indexed.returncode == 0, indexed.stderr
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout == "would delete 1 documents (1 chunks) from 'kb'\n  old.md\n"
    assert {h["doc_id"] for h in json.loads(still.stdout)["hits"]} == {"old.md", "new.md"}
    assert done.stdout == "deleted 1 documents (1 chunks) from 'kb'\n  old.md\n"
    assert [h["doc_id"] for h in json.loads(left.stdout)["hits"]] == ["new.md"]
    assert empty.returncode == 1 and "ragserve: error 400 empty_filter:" in empty.stderr
    assert not_json.returncode == 1 and "--filter is not JSON" in not_json.stderr
    assert unknown.returncode == 1
    assert unknown.stderr == "ragserve: error 404 collection_not_found: collection 'nope' does not exist (param collection)\n"


def _fresh(**env: str) -> dict[str, str]:
    """A new shell's environment: nothing of this session's (no RAGSERVE_ variable but those given)."""
    return {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8", **env}


RAGSERVE = str(Path(sys.executable).parent / "ragserve")  # the installed command, as a user runs it


def test_a_fresh_shell_with_the_client_variables_indexes_and_searches(minilm_settings: Settings,
                                                                       tmp_path: Path) -> None:
    folder = tmp_path / "kb"  # tmp_path is the server's data directory too
    folder.mkdir()
    (folder / "espresso.md").write_text("# Coffee\nEspresso forces hot water through fine coffee.\n")
    minilm_settings.indexer.poll_s = 0.05
    with live_server(minilm_settings, with_worker=True) as url:
        env = _fresh(RAGSERVE_URL=url, RAGSERVE_API_KEY=API_KEY)
        indexed = subprocess.run([RAGSERVE, "index", str(folder), "--collection", "kb", "--quiet"], env=env,
                                 text=True, capture_output=True, timeout=300)
        found = subprocess.run([RAGSERVE, "search", "espresso", "--collection", "kb", "--json"], env=env, text=True,
                               capture_output=True, timeout=300)
        wrong = subprocess.run([RAGSERVE, "search", "espresso", "--collection", "kb", "--api-key",
                                "wrong-key-0123456789"], env=env, text=True, capture_output=True, timeout=300)
    assert indexed.returncode == 0, indexed.stderr
    assert "1 seen, 1 indexed" in indexed.stdout
    assert found.returncode == 0, found.stderr
    assert [h["doc_id"] for h in json.loads(found.stdout)["hits"]] == ["espresso.md"]
    assert wrong.returncode == 1 and "ragserve: error 401 invalid_api_key" in wrong.stderr  # --api-key wins


def test_a_missing_key_names_the_variable_and_the_servers_list_is_not_read() -> None:
    done = subprocess.run([RAGSERVE, "search", "x", "--collection", "kb"], text=True, capture_output=True,
                          env=_fresh(RAGSERVE_URL="http://127.0.0.1:9", RAGSERVE_API_KEYS=API_KEY), timeout=120)
    assert done.returncode == 1
    assert done.stderr == ("ragserve: no API key: pass --api-key or set RAGSERVE_API_KEY (a key the server accepts; "
                           "RAGSERVE_API_KEYS is the server's own list, not read by client commands)\n")


def test_a_misspelt_client_variable_is_named() -> None:
    done = subprocess.run([RAGSERVE, "search", "x", "--collection", "kb"], text=True, capture_output=True,
                          env=_fresh(RAGSERVE_APIKEY=API_KEY), timeout=120)
    assert done.returncode == 2
    assert done.stderr == ("ragserve: unknown setting(s) in the environment: RAGSERVE_APIKEY (did you mean "
                           "RAGSERVE_API_KEY?). Every RAGSERVE_ variable must name a setting (service/config/).\n")
