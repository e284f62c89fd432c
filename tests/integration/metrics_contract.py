"""The metrics contract (docs/metrics.md) as data, for the tests that check dashboards and alerts
against it. Not a test itself (ctest runs tests/integration/test_*.py only)."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
METRICS_MD = os.path.join(ROOT, "docs", "metrics.md")


def families(path=METRICS_MD):
    """{name: (type, [labels])} from the contract's table rows: | `name` | type | labels | meaning |"""
    out = {}
    for line in open(path, encoding="utf-8"):
        m = re.match(r"\|\s*`((?:sluice|process)_[a-z0-9_]+)`\s*\|\s*(\w+)\s*\|([^|]*)\|", line)
        if m:
            labels = [l.strip() for l in m.group(3).split(",") if l.strip()]
            out[m.group(1)] = (m.group(2), labels)
    return out


def exposed_names(path=METRICS_MD):
    """Every series name a scrape can show: histograms add _bucket, _sum and _count."""
    names = set()
    for name, (kind, _) in families(path).items():
        names.add(name)
        if kind == "histogram":
            names.update({name + "_bucket", name + "_sum", name + "_count"})
    return names
