"""An ablation of plan_grid.cuh for the step-clock lab (its outputs are wrong on purpose).

Usage: python3 make_variant.py plan_grid.cuh out.cuh FLAG[,FLAG...]   ('' for none)
  no_scatter  the placement's two scattered stores (sorted_token[row], sorted_weight[row])
              are skipped (a never-true condition keeps the code)
  coalesced   the same two stores go to consecutive addresses (entry order): as many store
              instructions, whole sectors
  no_pos      the placement's pos stores are skipped"""
import sys

src, dst, flags = sys.argv[1], sys.argv[2], set(filter(None, sys.argv[3].split(",")))
unknown = flags - {"no_scatter", "coalesced", "no_pos"}
assert not unknown, f"unknown flags {sorted(unknown)}"
s = open(src).read()
SCATTER = """          p.sorted_token[row] = token;
          p.sorted_weight[row] = wv[c];
        }"""


def rep(old, new):
    global s
    assert s.count(old) == 1, f"pattern not found once: {old!r}"
    s = s.replace(old, new)


if "no_scatter" in flags:
    rep(SCATTER, """          if (p.n < 0) { p.sorted_token[row] = token; p.sorted_weight[row] = wv[c]; }
        }""")
if "coalesced" in flags:
    rep(SCATTER, """          p.sorted_token[i] = token;
          p.sorted_weight[i] = wv[c];
        }""")
if "no_pos" in flags:
    rep("      p.pos[i] = row;\n", "      if (p.n < 0) p.pos[i] = row;\n")
open(dst, "w").write(s)
