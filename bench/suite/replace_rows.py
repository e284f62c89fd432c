"""Replaces some policies' rows of a fleetsim JSON-lines file with a rerun's.

usage: replace_rows.py BASE.json RERUN.json OUT.json POLICY[,POLICY...]

OUT gets BASE's rows of every other policy, then every JSON row of RERUN (fleetsim is deterministic
for the seed, so the kept rows are what a full rerun would print). OUT may be BASE.
Used by scripts/bench-policies.sh (ONLY=...) and bench/suite/rerun_sluice.sh.
"""
import json
import sys

base, rerun, out, names = sys.argv[1], sys.argv[2], sys.argv[3], set(sys.argv[4].split(","))
keep = [l for l in open(base) if l.strip() and json.loads(l)["policy"] not in names]
new = [l for l in open(rerun) if l.strip().startswith("{")]
with open(out, "w") as f:
    f.write("".join(keep + new))
