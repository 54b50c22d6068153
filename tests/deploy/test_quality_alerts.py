"""deploy/kubernetes/components/quality-alerts/: the retrieval-quality drift alerts, a Prometheus Operator
PrometheusRule in a kustomize component of its own.

Checked without a cluster and without a Prometheus: the component renders onto the base and onto every overlay
(kustomize, as `kubectl apply -k` renders it); the rule matches the PrometheusRule CRD's own schema, kept in
the repository (schema/README.md says where it came from), and the validation is shown to reject broken
copies; every metric the expressions name is one ragserve exports, with labels it has; and the component stays
out of the base and the overlays, which must apply on clusters without the Prometheus Operator. The PromQL is
not executed: no test here knows whether a rule would fire (docs/quality-alerts.md).
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.deploy.manifests import DEPLOY, KUBERNETES, OVERLAYS, k8s_objects, kustomization, kustomize_command, render

KUBERNETES_ROOT = DEPLOY / "kubernetes"
COMPONENT = KUBERNETES_ROOT / "components" / "quality-alerts"
SCHEMA_FILE = COMPONENT / "schema" / "prometheusrule-v1.json"
DOC = DEPLOY.parent / "docs" / "quality-alerts.md"


@dataclass(frozen=True)
class Metric:
    kind: str  # "counter" or "histogram"
    labels: frozenset[str]


def _metric(kind: str, *labels: str) -> Metric:
    return Metric(kind, frozenset(labels))


# What ragserve exports (service/quality/metrics.py), with the labels each series has. A histogram is queried
# through its _bucket (with le), _sum and _count series.
METRICS = {
    "ragserve_searches_total": _metric("counter", "collection", "mode"),
    "ragserve_search_zero_hits_total": _metric("counter", "collection", "restricted"),
    "ragserve_search_top_score": _metric("histogram", "collection", "mode"),
    "ragserve_search_top_rerank_score": _metric("histogram", "collection"),
    "ragserve_search_reranked_total": _metric("counter", "collection"),
    "ragserve_search_rerank_top_changed_total": _metric("counter", "collection"),
    "ragserve_search_low_score_total": _metric("counter", "collection", "mode"),
    "ragserve_feedback_total": _metric("counter", "collection", "rating"),
    "ragserve_query_log_dropped_total": _metric("counter", "reason"),
}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

# The alerts the component ships, with their `for` (docs/quality-alerts.md explains each).
ALERTS = {
    "RagserveZeroHitRateJump": "15m",
    "RagserveTopScoreShift": "30m",
    "RagserveTopRerankScoreShift": "30m",
    "RagserveQueryLogDropping": "10m",
}
DRIFT_ALERTS = ("RagserveZeroHitRateJump", "RagserveTopScoreShift", "RagserveTopRerankScoreShift")

# metadata.name and .namespace: DNS-1123 subdomain and label (Kubernetes checks these, the CRD schema does not).
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
ALERT_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def needs_kustomize() -> None:
    if kustomize_command() is None:  # CI must render; elsewhere kubectl may be missing (as in test_overlays)
        if os.environ.get("CI"):
            pytest.fail("no kustomize to render the component: install kubectl 1.27+ (or kustomize)", pytrace=False)
        pytest.skip("no kubectl or kustomize on PATH")


# --------------------------------------------------------------------------------------------- loading


@cache
def component_kustomization() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    return data


@cache
def rule_documents() -> tuple[dict[str, Any], ...]:
    """Every object in the component's resources (one file, one PrometheusRule)."""
    out = []
    for name in component_kustomization()["resources"]:
        out += [body for body in yaml.safe_load_all((COMPONENT / name).read_text()) if body is not None]
    return tuple(out)


def prometheus_rule() -> dict[str, Any]:
    """A fresh copy of the PrometheusRule, for tests to break."""
    [rule] = rule_documents()
    return copy.deepcopy(rule)


def alerting_rules(body: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    body = body or prometheus_rule()
    return [r for group in body["spec"]["groups"] for r in group["rules"] if "alert" in r]


def render_with_component(target: Path) -> tuple[dict[str, Any], ...]:
    """``target`` (the base or an overlay) with the component, as an overlay of one's own enables it:
    a kustomization naming ``target`` as a resource and the component under ``components``."""
    command = kustomize_command()
    assert command is not None
    with tempfile.TemporaryDirectory() as tmp:
        # kustomize takes other kustomizations by relative path only ("new root cannot be absolute")
        overlay = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [os.path.relpath(target, tmp)],
            "components": [os.path.relpath(COMPONENT, tmp)],
        }
        Path(tmp, "kustomization.yaml").write_text(yaml.safe_dump(overlay))
        done = subprocess.run([*command, tmp], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{' '.join(command)} with the component on {target}: {done.stderr}"
    return tuple(body for body in yaml.safe_load_all(done.stdout) if body is not None)


# ----------------------------------------------------------------------------------------- the schema


def _re2_to_python(pattern: str) -> str:
    """The CRD's patterns are Go (RE2) regular expressions, as the API server evaluates them. One of them,
    ``^(?i)(abort|warn)?$``, puts a global flag after ``^``, which Python 3.11+ refuses; moved in front it means
    the same to Python."""
    return re.sub(r"^\^\(\?([a-zA-Z]+)\)", r"(?\1)^", pattern)


def _as_applied(schema: Any) -> Any:
    """The stored schema as `kubectl apply` holds objects to it: patterns in Python's dialect, and unknown
    fields refused (kubectl's default field validation is Strict: an unknown field fails the apply). Objects
    the CRD leaves open (``metadata``, ``additionalProperties`` maps) stay open."""
    if isinstance(schema, list):
        return [_as_applied(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _as_applied(v) for k, v in schema.items()}
    if isinstance(out.get("pattern"), str):
        out["pattern"] = _re2_to_python(out["pattern"])
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


@cache
def stored_schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SCHEMA_FILE.read_text())
    return data


@cache
def validator() -> jsonschema.protocols.Validator:
    # A CRD's openAPIV3Schema is OpenAPI 3.0's schema object, i.e. JSON Schema draft 4 (wright-00) plus
    # extensions; jsonschema ignores the x-kubernetes-* keywords, the one that matters is checked below.
    schema = _as_applied(stored_schema())
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


def problems(body: dict[str, Any]) -> list[str]:
    """What the API server (with the CRD installed) and Prometheus would refuse in ``body``: the CRD schema's
    errors, then what the schema leaves to others (the object's identity, list-map keys, alert or record)."""
    found = [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in validator().iter_errors(body)]
    # The CRD types these as plain strings and an open object; Kubernetes itself checks them.
    if body.get("apiVersion") != "monitoring.coreos.com/v1":
        found.append(f"apiVersion {body.get('apiVersion')!r} is not monitoring.coreos.com/v1")
    if body.get("kind") != "PrometheusRule":
        found.append(f"kind {body.get('kind')!r} is not PrometheusRule")
    metadata = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    if not DNS_SUBDOMAIN.fullmatch(str(metadata.get("name", ""))) or len(str(metadata.get("name"))) > 253:
        found.append(f"metadata.name {metadata.get('name')!r} is not a DNS-1123 subdomain")
    if metadata.get("namespace") != kustomization()["namespace"]:
        found.append(f"metadata.namespace {metadata.get('namespace')!r} is not the base's "
                     f"{kustomization()['namespace']!r} (a component is not renamespaced by the base)")
    for field in ("labels", "annotations"):
        values = metadata.get(field) or {}
        if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
            found.append(f"metadata.{field} must map names to strings")
    groups = body.get("spec", {}).get("groups", []) if isinstance(body.get("spec"), dict) else []
    names = [g.get("name") for g in groups if isinstance(g, dict)]
    if len(names) != len(set(names)):  # x-kubernetes-list-type: map, keyed by name
        found.append(f"group names repeat: {names}")
    for g in groups:
        for i, r in enumerate(g.get("rules", []) if isinstance(g, dict) else []):
            if not isinstance(r, dict):
                continue
            if ("alert" in r) == ("record" in r):
                found.append(f"{g.get('name')}/rules/{i}: exactly one of alert and record")
            elif "alert" in r and not ALERT_NAME.fullmatch(str(r["alert"])):
                found.append(f"{g.get('name')}/rules/{i}: alert {r['alert']!r} is not a valid name")
            if "record" in r and ("annotations" in r or "for" in r):
                found.append(f"{g.get('name')}/rules/{i}: a recording rule has no for or annotations")
    return found


# --------------------------------------------------------------------------------------- metric names


METRIC_TOKEN = re.compile(r"\bragserve_[a-z_]+")
SELECTOR = re.compile(r"\b(ragserve_[a-z_]+)\s*\{([^}]*)\}")
MATCHER_LABEL = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")


def exported(token: str) -> tuple[str, Metric, str] | None:
    """``token`` -> (the exported metric, its description, the histogram suffix or ""), or None."""
    if token in METRICS:
        return token, METRICS[token], ""
    for suffix in HISTOGRAM_SUFFIXES:
        base = token.removesuffix(suffix)
        if base != token and base in METRICS and METRICS[base].kind == "histogram":
            return base, METRICS[base], suffix
    return None


def metric_problems(expr: str) -> list[str]:
    """Every ``ragserve_*`` name in a PromQL expression must be an exported series (a histogram only through
    _bucket, _sum or _count), and every label it matches on or groups by must be one those series have."""
    found = []
    used: set[str] = set()
    for token in sorted(set(METRIC_TOKEN.findall(expr))):
        known = exported(token)
        if known is None:
            found.append(f"{token}: not a series ragserve exports")
            continue
        name, metric, suffix = known
        if metric.kind == "histogram" and not suffix:
            found.append(f"{token}: a histogram is queried through {', '.join(HISTOGRAM_SUFFIXES)}")
        used |= metric.labels | ({"le"} if suffix == "_bucket" else set())
    for token, matchers in SELECTOR.findall(expr):
        if (known := exported(token)) is not None:
            has = known[1].labels | ({"le"} if known[2] == "_bucket" else set())
            found += [f"{token}: no label {label!r}" for label in MATCHER_LABEL.findall(matchers) if label not in has]
    for labels in GROUPING.findall(expr):
        found += [f"by/on ({labels}): no series here has {label!r}"
                  for label in (x.strip() for x in labels.split(",")) if label and label not in used]
    return found


def surviving_labels(expr: str) -> set[str]:
    """Labels every aggregation of ``expr`` keeps (``by (...)``), which its alerts can therefore carry."""
    clauses = [{x.strip() for x in labels.split(",")} - {"", "le"}
               for labels in re.findall(r"\bby\s*\(([^)]*)\)", expr)]
    return set.intersection(*clauses) if clauses else set()


# ------------------------------------------------------------------------------------------ the component


def test_component_lists_every_file() -> None:
    data = component_kustomization()
    assert data["apiVersion"] == "kustomize.config.k8s.io/v1alpha1" and data["kind"] == "Component"
    on_disk = {p.name for p in COMPONENT.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(data["resources"]) == on_disk == {"prometheusrule.yaml"}
    assert [d["kind"] for d in rule_documents()] == ["PrometheusRule"]


@pytest.mark.parametrize("target", ["base", *sorted(p.name for p in OVERLAYS.iterdir() if p.is_dir())])
def test_component_renders_onto_the_base_and_every_overlay(target: str) -> None:
    """Enabled in an overlay, the component adds the PrometheusRule, unchanged, and changes nothing else."""
    needs_kustomize()
    folder = KUBERNETES if target == "base" else OVERLAYS / target
    rendered = render_with_component(folder)
    rules = [o for o in rendered if o["kind"] == "PrometheusRule"]
    assert rules == [prometheus_rule()], target
    assert [o for o in rendered if o["kind"] != "PrometheusRule"] == [o.body for o in render(folder)], target
    assert problems(rules[0]) == []


def test_the_rule_matches_the_crd_schema() -> None:
    assert problems(prometheus_rule()) == []


def test_the_stored_schema_is_the_prometheus_operators() -> None:
    """The file is the CRD's openAPIV3Schema as converted (schema/README.md), its origin recorded in it."""
    schema = stored_schema()
    assert "prometheus-operator v" in schema["$comment"] and re.search(r"\b[0-9a-f]{40}\b", schema["$comment"])
    rule = schema["properties"]["spec"]["properties"]["groups"]["items"]["properties"]["rules"]["items"]
    assert rule["required"] == ["expr"] and {"alert", "expr", "for", "labels", "annotations"} <= set(rule["properties"])
    assert schema["required"] == ["spec"]


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(body: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        node: Any = body
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return change


def _delete(path: str) -> Callable[[dict[str, Any]], None]:
    def change(body: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        node: Any = body
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        del node[last]
    return change


def _rename_expr(body: dict[str, Any]) -> None:
    rule = body["spec"]["groups"][0]["rules"][0]
    rule["expression"] = rule.pop("expr")


def _duplicate_group(body: dict[str, Any]) -> None:
    body["spec"]["groups"].append(copy.deepcopy(body["spec"]["groups"][0]))


RULE = "spec/groups/0/rules/0"
BROKEN: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "a rule without expr": (_delete(f"{RULE}/expr"), "'expr' is a required property"),
    "for as a number": (_set(f"{RULE}/for", 15), "15 is not of type 'string'"),
    "for in words": (_set(f"{RULE}/for", "15 minutes"), "'15 minutes' does not match"),
    "expr as a list": (_set(f"{RULE}/expr", ["up"]), "is not valid under any of the given schemas"),
    "a misspelt field": (_rename_expr, "Additional properties are not allowed ('expression' was unexpected)"),
    "a label that is not a string": (_set(f"{RULE}/labels/severity", 3), "3 is not of type 'string'"),
    "a group without a name": (_delete("spec/groups/0/name"), "'name' is a required property"),
    "an empty group name": (_set("spec/groups/0/name", ""), "spec/groups/0/name: "),  # minLength: 1
    "a bad interval": (_set("spec/groups/0/interval", "1 minute"), "'1 minute' does not match"),
    "no spec": (_delete("spec"), "'spec' is a required property"),
    "two groups of one name": (_duplicate_group, "group names repeat"),
    "alert and record": (_set(f"{RULE}/record", "ragserve:zero_hits:ratio"), "exactly one of alert and record"),
    "an alert name with spaces": (_set(f"{RULE}/alert", "Zero hits"), "is not a valid name"),
    "another apiVersion": (_set("apiVersion", "monitoring.coreos.com/v1alpha1"), "is not monitoring.coreos.com/v1"),
    "another kind": (_set("kind", "PrometheusRules"), "is not PrometheusRule"),
    "no namespace": (_delete("metadata/namespace"), "metadata.namespace None"),
    "a name with capitals": (_set("metadata/name", "Ragserve-Quality"), "not a DNS-1123 subdomain"),
}


@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_rule_is_rejected(case: str) -> None:
    """The validation can fail: each broken copy of the rule is refused, for the reason expected."""
    change, expected = BROKEN[case]
    body = prometheus_rule()
    change(body)
    found = problems(body)
    assert any(expected in p for p in found), f"{case}: {found}"


def test_the_schema_keeps_the_crd_patterns() -> None:
    """The one Go-only pattern is rewritten for Python, and means the same: the Thanos partial response
    strategy, any case, or empty."""
    assert _re2_to_python("^(?i)(abort|warn)?$") == "(?i)^(abort|warn)?$"
    body = prometheus_rule()
    for value, ok in (("WARN", True), ("abort", True), ("", True), ("ignore", False)):
        body["spec"]["groups"][0]["partial_response_strategy"] = value
        assert (problems(body) == []) is ok, value


# -------------------------------------------------------------------------------------------- the rules


def test_the_rules_are_the_documented_ones() -> None:
    body = prometheus_rule()
    assert [g["name"] for g in body["spec"]["groups"]] == ["ragserve-retrieval-quality"]
    rules = alerting_rules(body)
    assert {r["alert"]: r["for"] for r in rules} == ALERTS
    doc = DOC.read_text()
    for r in rules:
        assert r["labels"]["severity"] in ("warning", "critical"), r["alert"]
        assert {"summary", "description"} <= set(r["annotations"]), r["alert"]
        assert r["alert"] in doc, f"{r['alert']} is not in {DOC.name}"
        if r["alert"] in DRIFT_ALERTS:
            assert "offset 1d" in r["expr"], f"{r['alert']} compares with the day before"
            assert "{{ $labels.collection }}" in r["annotations"]["summary"], r["alert"]


def test_every_metric_in_the_rules_is_exported() -> None:
    names = set()
    for r in alerting_rules():
        assert metric_problems(r["expr"]) == [], r["alert"]
        names |= {known[0] for t in METRIC_TOKEN.findall(r["expr"]) if (known := exported(t)) is not None}
        for text in r["annotations"].values():  # metric names in the prose must exist too
            assert [t for t in METRIC_TOKEN.findall(text) if exported(t) is None] == [], r["alert"]
    assert names == {"ragserve_searches_total", "ragserve_search_zero_hits_total", "ragserve_search_top_score",
                     "ragserve_search_top_rerank_score", "ragserve_query_log_dropped_total"}


@pytest.mark.parametrize(("expr", "expected"), [
    ("rate(ragserve_search_zero_hit_total[1h])", "ragserve_search_zero_hit_total: not a series"),
    ("rate(ragserve_searches[1h])", "ragserve_searches: not a series"),
    ("rate(ragserve_searches_total_bucket[1h])", "ragserve_searches_total_bucket: not a series"),
    ("histogram_quantile(0.5, rate(ragserve_search_top_score[1h]))", "queried through _bucket"),
    ("rate(ragserve_search_zero_hits_total{tenant=\"a\"}[1h])", "no label 'tenant'"),
    ("sum by (collection, model) (rate(ragserve_searches_total[1h]))", "no series here has 'model'"),
    ("sum by (le) (rate(ragserve_search_top_score_count[1h]))", "no series here has 'le'"),
])
def test_a_renamed_metric_or_label_is_caught(expr: str, expected: str) -> None:
    assert any(expected in p for p in metric_problems(expr)), metric_problems(expr)


def test_annotations_use_labels_the_alert_keeps() -> None:
    """``{{ $labels.X }}`` renders empty where the aggregation dropped X."""
    for r in alerting_rules():
        used = set(re.findall(r"\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)", " ".join(r["annotations"].values())))
        assert used <= surviving_labels(r["expr"]), f"{r['alert']}: {used - surviving_labels(r['expr'])}"
        text = " ".join(r["annotations"].values())
        assert text.count("{{") == text.count("}}"), r["alert"]


def test_the_metric_table_is_what_the_service_exports() -> None:
    """METRICS above against the service's collector: a metric renamed there fails here too."""
    from service.quality.metrics import QualityCollector

    families = {m.name: m.type for m in QualityCollector().collect()}
    expected = {name.removesuffix("_total") if m.kind == "counter" else name: m.kind for name, m in METRICS.items()}
    assert families == expected


def test_promtool_accepts_the_rules(tmp_path: Path) -> None:
    """Only where promtool is installed: it parses the PromQL (without running it)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("no promtool on PATH")
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(prometheus_rule()["spec"]))
    done = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr


# -------------------------------------------------------------------------------- kept out of the base


def test_no_kustomization_includes_the_component() -> None:
    """The base and the overlays apply on clusters without the Prometheus Operator's CRDs."""
    for path in KUBERNETES_ROOT.rglob("kustomization.yaml"):
        if COMPONENT in path.parents or path.parent == COMPONENT:
            continue
        data = yaml.safe_load(path.read_text())
        entries = [*(data.get("resources") or []), *(data.get("components") or [])]
        assert not [e for e in entries if "quality-alerts" in str(e)], path.relative_to(DEPLOY)


def test_base_and_overlays_hold_no_prometheus_rule() -> None:
    assert not [o for o in k8s_objects() if o.body["apiVersion"].startswith("monitoring.coreos.com/")]
    needs_kustomize()
    for folder in (KUBERNETES_ROOT, *sorted(p for p in OVERLAYS.iterdir() if p.is_dir())):
        assert not [o for o in render(folder) if o.kind == "PrometheusRule"], folder.relative_to(DEPLOY)


def test_kubernetes_schemas_do_not_know_the_rule() -> None:
    """Why it is validated here and kept out of k8s_objects(): kubernetes_validate (test_schemas) has no schema
    for a custom resource, and would stop with SchemaNotFoundError rather than check it."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        kubernetes_validate.validate(prometheus_rule(), kubernetes_validate.latest_version(), strict=True)
