#!/usr/bin/env python3
"""deploy/grafana/sluice-dashboard.json: valid JSON of a Grafana dashboard whose every query uses
only series from the metrics contract (docs/metrics.md) and parses as PromQL (promtool), with the
same panels as the live page (web/src/index.html); and the live page's script uses only contract
series too.

Run: python3 tests/integration/test_grafana_dashboard.py [--sluice path]   (--sluice is unused)"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import metrics_contract  # noqa: E402

DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "sluice-dashboard.json")
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
                "offset", "inf", "nan", "le"}
# The panels the live page shows; each must exist on both (case-insensitive substrings of titles).
SHARED_PANELS = ["prefix hit rate", "reject rate", "queue time p99", "ttft p99", "kv cache usage per endpoint",
                 "waiting requests per endpoint", "picks per endpoint", "duty cycle per endpoint", "gateway overhead",
                 "hot prefixes"]


def walk_panels(panels):
    for p in panels:
        yield p
        yield from walk_panels(p.get("panels", []))


def grafana_to_promql(expr):
    """Substitutes Grafana's variables so the expression can be parsed by promtool."""
    return (expr.replace("$__rate_interval", "1m").replace("$__interval", "1m").replace("$__range", "1h")
            .replace("$pool", ".*"))


def metric_names(expr):
    """Series names an expression selects: identifiers outside strings, label matchers, ranges and
    grouping clauses that are not function calls or PromQL keywords."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"(?<![A-Za-z0-9_:])(\d+(ms|s|m|h|d|w|y))+\b", " ", e)  # durations (offset 5m)
    e = re.sub(r"(?<![A-Za-z0-9_:])\d+(\.\d+)?([eE][-+]?\d+)?", " ", e)  # number literals
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        word = m.group(0)
        rest = e[m.end():].lstrip()
        if rest.startswith("(") or word.lower() in PROMQL_WORDS:
            continue
        names.add(word)
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", default=None)
    ap.parse_args()
    failures = []
    with open(DASHBOARD, encoding="utf-8") as f:
        dash = json.load(f)  # invalid JSON fails the test here
    known = metrics_contract.exposed_names()
    families = metrics_contract.families()
    if len(families) < 20:
        failures.append(f"docs/metrics.md parsed into only {len(families)} families")

    for key in ("uid", "title", "schemaVersion", "panels", "templating"):
        if key not in dash:
            failures.append(f"dashboard lacks {key}")
    variables = {v["name"]: v for v in dash.get("templating", {}).get("list", [])}
    if variables.get("datasource", {}).get("type") != "datasource":
        failures.append("no datasource variable (a portable dashboard selects its Prometheus)")
    if "pool" not in variables:
        failures.append("no pool variable")

    panels = list(walk_panels(dash.get("panels", [])))
    ids = [p.get("id") for p in panels]
    if len(ids) != len(set(ids)):
        failures.append(f"duplicate panel ids: {ids}")
    exprs = []
    used = set()
    for p in panels:
        if p.get("type") == "row":
            continue
        targets = p.get("targets", [])
        if not targets:
            failures.append(f"panel {p.get('title')!r} has no queries")
        for t in targets:
            expr = t.get("expr", "")
            names = metric_names(expr)
            if not names:
                failures.append(f"panel {p.get('title')!r}: expr selects no series: {expr}")
            unknown = sorted(n for n in names if n not in known)
            if unknown:
                failures.append(f"panel {p.get('title')!r}: not in docs/metrics.md: {unknown} in {expr}")
            pooled = [n for n in names if n in known and "pool" in families.get(
                re.sub(r"_(bucket|sum|count)$", "", n) if n not in families else n, ("", ["pool"]))[1]]
            if pooled and "$pool" not in expr:  # series without a pool label (tenant tokens) cannot filter
                failures.append(f"panel {p.get('title')!r}: query ignores the pool variable: {expr}")
            if t.get("datasource", {}).get("uid") != "${datasource}":
                failures.append(f"panel {p.get('title')!r}: query not bound to the datasource variable")
            used |= names
            exprs.append(expr)
    print(f"{len(panels)} panels, {len(exprs)} queries, {len(used)} distinct series")

    titles = " | ".join(p.get("title", "").lower() for p in panels)
    page = open(os.path.join(ROOT, "web", "src", "index.html"), encoding="utf-8").read().lower()
    for want in SHARED_PANELS:
        if want not in titles:
            failures.append(f"Grafana dashboard lacks the page's panel {want!r}")
        if want not in page:
            failures.append(f"web/src/index.html lacks the panel {want!r}")

    # The live page reads only contract series too.
    app = open(os.path.join(ROOT, "web", "src", "app.js"), encoding="utf-8").read()
    page_names = set(re.findall(r'"(sluice_[a-z0-9_]+)"', app))
    bad = sorted(n for n in page_names if n not in known)
    if bad:
        failures.append(f"web/src/app.js uses series not in docs/metrics.md: {bad}")
    if len(page_names) < 12:
        failures.append(f"web/src/app.js reads only {sorted(page_names)}")

    # Every query parses as PromQL: promtool checks them as recording rules.
    promtool = shutil.which("promtool")
    if promtool:
        with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
            f.write("groups:\n  - name: grafana_queries\n    rules:\n")
            for i, e in enumerate(exprs):
                f.write(f"      - record: grafana:query_{i}\n        expr: {json.dumps(grafana_to_promql(e))}\n")
            path = f.name
        try:
            p = subprocess.run([promtool, "check", "rules", path], capture_output=True, text=True, timeout=60)
            print(f"promtool parses the {len(exprs)} queries: {'ok' if p.returncode == 0 else 'FAILED'}")
            if p.returncode != 0:
                failures.append("promtool rejects a query:\n" + p.stdout + p.stderr)
        finally:
            os.unlink(path)
    else:
        print("note: promtool not found, PromQL syntax not checked (scripts/install-deps.sh installs it)")

    if failures:
        print("\n".join(failures))
        print("0 passed, 1 failed")
        return 1
    print("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
