"""Replaces some policies' rows of a fleetsim JSON-lines file with a rerun's.

usage: replace_rows.py BASE.json RERUN.json OUT.json POLICY[,POLICY...]

OUT gets BASE's rows of every other policy, then every JSON row of RERUN (fleetsim is deterministic
for the seed, so the kept rows are what a full rerun would print). OUT may be BASE.
Used by scripts/bench-policies.sh (ONLY=...) and bench/suite/rerun_sluice.sh.
Refuses (exit 2, OUT untouched) when the rerun lacks a rate BASE had for one of the policies: a file
made by more than one command (long-hot64-s1.json: two rate lists) would otherwise lose the rows of
the commands not rerun.
"""
import json
import sys

base, rerun, out, names = sys.argv[1], sys.argv[2], sys.argv[3], set(sys.argv[4].split(","))
keep, old_rates = [], {}
for line in open(base):
    if not line.strip():
        continue
    row = json.loads(line)
    if row["policy"] in names:
        old_rates.setdefault(row["policy"], set()).add(row.get("offered_rate"))
    else:
        keep.append(line)
new = [l for l in open(rerun) if l.strip().startswith("{")]
new_rates = {}
for line in new:
    row = json.loads(line)
    new_rates.setdefault(row["policy"], set()).add(row.get("offered_rate"))
for policy, rates in sorted(old_rates.items()):
    missing = rates - new_rates.get(policy, set())
    if missing:
        print(f"replace_rows: {rerun} has no {policy} row at {sorted(missing)}, which {base} has: not replaced",
              file=sys.stderr)
        sys.exit(2)
with open(out, "w") as f:
    f.write("".join(keep + new))
