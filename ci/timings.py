"""The test command's time, apart: what it installed, what it compiled, how long each suite's tests
ran, and whether the run was cold or warm (issue 40). Reads the rows ci/lib.sh fg_time and
ci/prebuild.py append to $FG_TIMINGS (KIND, NAME, SECONDS, STATE per line).

    python ci/timings.py TIMINGS.tsv WALL_SECONDS

Cold: the run created an environment or the uv tool, or compiled a planner program; warm: it
found every one of them ready. Installs and builds run beside tests (ci/test.sh prefetches the
environments), so the parts add up to more than the wall time; each is the time that step took.
"""

from __future__ import annotations

import sys
from pathlib import Path


def summarize(rows: list[tuple[str, str, int, str]], wall: int) -> list[str]:
    made = [(n, s) for k, n, s, st in rows if k == "install" and st == "created"]
    built = [(n, s, st) for k, n, s, st in rows if k == "build" and st.startswith("built")]
    tests = [(n, s, st) for k, n, s, st in rows if k == "test"]
    cold = bool(made or built)
    out = []
    if cold:
        what = [n for n, _ in made] + [f"{n} ({st.split('=', 1)[1]} programs)" for n, _, st in built]
        out.append("=== run: COLD (made this run: " + "; ".join(what) + ")")
    else:
        out.append("=== run: WARM (every environment, uv and compiled planner found ready)")
    inst = sum(s for _, s in made)
    bld = sum(s for k, _, s, _ in rows if k == "build")
    out.append(f"=== time apart: installs {inst} s ({len(made)} created), builds {bld} s "
               f"({sum(int(st.split('=', 1)[1]) for _, _, st in built)} programs compiled), "
               f"tests {sum(s for _, s, _ in tests)} s over {len(tests)} runs; wall {wall} s "
               "(installs and builds run beside tests)")
    for n, s in made:
        out.append(f"    install {n:<22} {s:5d} s")
    for k, n, s, st in rows:
        if k == "build":
            out.append(f"    build   {n:<22} {s:5d} s  {st}")
    for n, s, st in tests:
        out.append(f"    tests   {n:<22} {s:5d} s  {st}")
    return out


def read(path: str) -> list[tuple[str, str, int, str]]:
    rows = []
    p = Path(path)
    if not p.exists():
        return rows
    for line in p.read_text().splitlines():
        parts = line.split("\t")
        if len(parts) == 4 and parts[2].isdigit():
            rows.append((parts[0], parts[1], int(parts[2]), parts[3]))
    return rows


if __name__ == "__main__":
    print("\n".join(summarize(read(sys.argv[1]), int(sys.argv[2]))))
