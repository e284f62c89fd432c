"""docs/config.md is kept in step with the parser (issue 19).

The keys are found by asking the parser itself, through `sluice validate`: a probe key put in a
mapping is refused with "unknown key (allowed: ...)", which lists the keys that mapping accepts;
each allowed key is then probed as a mapping and as a list of mappings, and is a section when the
parser answers with another allowed-list, a leaf otherwise. So a section added to the parser (by
any change) fails this test until the reference page has a row for each of its keys. The reverse
holds too: a row naming a key the parser does not accept fails. The page's example config and
config/example.yaml must validate, and every policy's parameter names (from the parser's "known:"
list) must be on the page.

Run: python3 test_config_docs.py --sluice path/to/sluice"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import unittest

SLUICE = None
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "config.md")
PROBE = "zz_probe"
# A minimal valid config: every list the probes descend into has one item.
BASE = {
    "pools": [{"name": "p", "endpoints": ["127.0.0.1:9"]}],
    "models": [{"name": "m", "pool": "p"}],
}
# The required keys of a list item, for probes that descend into a new one.
SEEDS = {"pools[].endpoints": {"address": "127.0.0.1:9"}, "tenants": {"name": "t"}, "tenants[].models": {"model": "m"}}


def dump(v, indent=0):
    """A tiny YAML writer (flow style), enough for the probes (standard library only)."""
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {dump(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(dump(x) for x in v) + "]"
    return str(v)


def validate_text(text, env=None):
    d = tempfile.mkdtemp(prefix="sluice-docs-")
    path = os.path.join(d, "c.yaml")
    with open(path, "w") as f:
        f.write(text)
    r = subprocess.run([SLUICE, "validate", "-c", path], capture_output=True, text=True, timeout=30,
                       env={**os.environ, **(env or {})})
    return r.returncode, r.stdout + r.stderr


def with_value(path, value):
    """BASE with `value` set at `path` (steps: str keys, 0 for the first list item)."""
    import copy
    cfg = copy.deepcopy(BASE)
    cur = cfg
    for i, step in enumerate(path[:-1]):
        nxt = path[i + 1]
        if isinstance(step, int):
            cur = cur[step]
            continue
        seed = dict(SEEDS.get(doc_path(path[:i + 1]), {}))
        if step not in cur or not isinstance(cur[step], (dict, list)):
            cur[step] = [seed] if isinstance(nxt, int) else {}
        elif isinstance(nxt, int) and isinstance(cur[step], list) and not isinstance(cur[step][0], dict):
            cur[step] = [seed]
        cur = cur[step]
    last = path[-1]
    cur[last] = value
    return "\n".join(f"{k}: {dump(v)}" for k, v in cfg.items()) + "\n"


def doc_path(path):
    out = ""
    for step in path:
        out += "[]" if isinstance(step, int) else ("." if out else "") + step
    return out


def allowed_keys(output, where):
    m = re.search(re.escape(where + "." + PROBE if where else PROBE) + r": unknown key \(allowed: ([^)]*)\)", output)
    return [k.strip() for k in m.group(1).split(",")] if m else None


def err_path(path):
    out = ""
    for step in path:
        out += "[0]" if isinstance(step, int) else ("." if out else "") + step
    return out


def discover():
    """Every key path the parser accepts, as docs write them (pools[].health.interval_ms)."""
    found = set()
    _, out = validate_text(with_value([PROBE], 1))
    todo = [([], allowed_keys(out, ""))]
    assert todo[0][1], out
    while todo:
        prefix, keys = todo.pop()
        for k in keys:
            path = prefix + [k]
            found.add(doc_path(path))
            _, out = validate_text(with_value(path, {PROBE: 1}))
            sub = allowed_keys(out, err_path(path))
            if sub:
                todo.append((path, sub))
                continue
            # A list of mappings says so when given a mapping ("expected a list", "must list ..."):
            # only those are probed again as a list (half the runs).
            mine = [l for l in out.splitlines() if l.strip().startswith(err_path(path) + ":")]
            if not any("list" in l for l in mine):
                continue
            _, out = validate_text(with_value(path, [{PROBE: 1}]))
            sub = allowed_keys(out, err_path(path + [0]))
            if sub:
                todo.append((path + [0], sub))
    return found


def documented():
    keys = set()
    for line in open(DOC, encoding="utf-8"):
        m = re.match(r"\|\s*`([a-z][a-z0-9_\[\]\.]*)`\s*\|", line)
        if m and not m.group(1).startswith("sluice"):
            keys.add(m.group(1))
    return keys


class ConfigDocs(unittest.TestCase):
    def test_every_accepted_key_is_documented_and_nothing_else(self):
        found = discover()
        self.assertGreater(len(found), 60, sorted(found))  # the probe itself works
        docs = documented()
        self.maxDiff = None
        self.assertEqual(sorted(found - docs), [], "keys the parser accepts but docs/config.md does not list")
        self.assertEqual(sorted(docs - found), [], "keys docs/config.md lists but the parser refuses")

    def test_policy_parameters_are_documented(self):
        _, out = validate_text(with_value(["pools", 0, "policy"], "zz_none"))
        names = re.search(r"unknown policy 'zz_none' \(known: ([^)]*)\)", out).group(1).split(", ")
        text = open(DOC, encoding="utf-8").read()
        for policy in names:
            self.assertIn(f"`{policy}`", text)
            cfg = with_value(["pools", 0, "policy"], policy).replace("pools: [{", "pools: [{policy_params: {zz_p: 1}, ", 1)
            _, out = validate_text(cfg)
            m = re.search(r"unknown parameter for policy '" + policy + r"' \(known: ([^)]*)\)", out)
            self.assertIsNotNone(m, out)
            for param in m.group(1).split(", "):
                if param != "none":
                    self.assertIn(f"`{param}`", text, f"policy {policy} parameter {param}")

    def test_examples_validate(self):
        text = open(DOC, encoding="utf-8").read()
        blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
        self.assertTrue(blocks)
        d = tempfile.mkdtemp(prefix="sluice-docs-key-")
        key = os.path.join(d, "key")
        with open(key, "w") as f:
            f.write("k\n")
        for b in blocks:
            b = b.replace("/dev/null-replace-me", key)
            code, out = validate_text(b, env={"SLUICE_DOCS_EXAMPLE_KEY": "k"})
            self.assertEqual(code, 0, out)
        code, out = validate_text(open(os.path.join(ROOT, "config", "example.yaml")).read())
        self.assertEqual(code, 0, out)


def main():
    global SLUICE
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    args, rest = ap.parse_known_args()
    SLUICE = os.path.abspath(args.sluice)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
