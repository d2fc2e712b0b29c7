"""The table of an A/B made by bench/plan_ab.py: for each side (the tag without its trailing
repeat digits: old1 and old2 are "old"), the best time of its repeats per (dist, T), and the
difference of the second side from the first.

    python bench/plan_ab_table.py DIR [first_side second_side]     # default: old new
"""
import glob
import json
import os
import re
import sys


def load_sides(folder):
    """{side: {key: (best us, every repeat bit-exact)}} from DIR/ab_<tag>.json."""
    sides = {}
    for path in sorted(glob.glob(os.path.join(folder, "ab_*.json"))):
        side = re.sub(r"\d+$", "", os.path.basename(path)[len("ab_"):-len(".json")])
        with open(path) as f:
            for key, (us, exact) in json.load(f).items():
                best, all_exact = sides.setdefault(side, {}).get(key, (float("inf"), True))
                sides[side][key] = (min(best, us), all_exact and exact)
    return sides


def main():
    """Prints the table; exits 1 if a point is missing on a side or a plan was not bit-exact."""
    if len(sys.argv) not in (2, 4):
        raise SystemExit(__doc__)
    folder = sys.argv[1]
    first, second = sys.argv[2:4] if len(sys.argv) == 4 else ("old", "new")
    sides = load_sides(folder)
    missing = [s for s in (first, second) if s not in sides]
    if missing:
        raise SystemExit(f"no ab_<tag>.json for {missing} in {folder} (found {sorted(sides)})")
    print(f"{'dist/T':22s}{first:>10s}{second:>10s}{'diff':>9s}  bit_exact")
    absent = (float("nan"), False)
    ok = True
    for key in dict.fromkeys([*sides[first], *sides[second]]):  # both sides' points, in order
        (a, a_exact), (b, b_exact) = sides[first].get(key, absent), sides[second].get(key, absent)
        ok = ok and a_exact and b_exact
        print(f"{key:22s}{a:10.2f}{b:10.2f}{b - a:+9.2f}  {a_exact and b_exact}")
    if not ok:
        raise SystemExit("some point is missing on a side or not bit-exact")


if __name__ == "__main__":
    main()
