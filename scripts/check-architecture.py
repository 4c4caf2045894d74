#!/usr/bin/env python3
"""Checks docs/architecture.md's "From RPC to OS call" table against the code (CI's docs step).

Every step in the table is written `path` `function`: the function must be defined (`fn name`)
in that file, every group must have a row, and every path the section's text names must exist.
Exits 1 naming each step that no longer holds.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GROUPS = {"filesystem", "disk", "volume", "smb", "iscsi", "system"}


def main():
    text = (ROOT / "docs/architecture.md").read_text()
    problems = []
    rows = [l for l in text.splitlines()
            if (m := re.match(r"^\| (\w+) · \w+ \|", l)) and m.group(1) in GROUPS]
    seen = {re.match(r"^\| (\w+) ·", r).group(1) for r in rows}
    for g in sorted(GROUPS - seen):
        problems.append(f"no row for the {g} group")
    steps = 0
    for row in rows:
        rpc = row.split("|")[1].strip()
        for path, name in re.findall(r"`((?:crates|scripts)/[\w/.-]+\.rs)` `(\w+)`", row):
            steps += 1
            file = ROOT / path
            if not file.is_file():
                problems.append(f"{rpc}: {path} does not exist")
            elif not re.search(rf"\bfn {name}\b", file.read_text()):
                problems.append(f"{rpc}: {path} defines no fn {name}")
        # A step may list more functions of the same file: `path` `a`, `b`.
        for path, more in re.findall(r"`([\w/.-]+\.rs)` `\w+`((?:, `\w+`)+)", row):
            for name in re.findall(r"`(\w+)`", more):
                if not re.search(rf"\bfn {name}\b", (ROOT / path).read_text()):
                    problems.append(f"{rpc}: {path} defines no fn {name}")
    for path in sorted(set(re.findall(r"`(crates/[\w/.-]+\.rs)`", text))):
        if not (ROOT / path).is_file():
            problems.append(f"{path} is named but does not exist")
    for p in problems:
        print(f"check-architecture: {p}", file=sys.stderr)
    if problems:
        return 1
    print(f"check-architecture: {len(rows)} rows, {steps} steps, every function where the table says")
    return 0


if __name__ == "__main__":
    sys.exit(main())
