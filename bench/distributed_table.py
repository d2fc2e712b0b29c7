"""The README table of the expert-parallel benchmark (bench/bench_distributed.py's JSON), for
make_tables.py. Imports nothing heavy (make_tables runs without torch)."""


def _ms(us):
    return f"{us / 1e3:.1f}" if us >= 1e3 else f"{us / 1e3:.2f}"


def _pct(x):
    return f"{100 * x:.0f}%"


def distributed_table(data):
    """One row per (config, ranks, T): the single-device layer on all the ranks' tokens, then each
    mode's time, its speed against the single device, and its share of time in collectives
    (all_to_all: the split-size handshake's share, then every collective's)."""
    records = data["records"] if isinstance(data, dict) else data
    rows = ["| config | ranks | T per rank (all) | one device (ms) | all_to_all (ms) | vs one | "
            "handshake / all collectives | no_sync (ms) | vs one | collectives |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    by_key = {}
    for r in records:
        key = (r["config"], r["world"], r["T_rank"])
        by_key.setdefault(key, {})[r["mode"]] = r
    for (config, world, T_rank), modes in sorted(by_key.items()):
        any_r = next(iter(modes.values()))
        one = any_r["single_us"]
        cells = []
        for mode in ("all_to_all", "no_sync"):
            r = modes.get(mode)
            if r is None:
                cells.append("- | - | -" if mode == "all_to_all" else "- | - | -")
                continue
            share = _pct(r["collective_share"])
            if mode == "all_to_all":
                share = f"{_pct(r['handshake_share'])} / {share}"
            cells.append(f"{_ms(r['ep_us'])} | {one / r['ep_us']:.2f}x | {share}")
        rows.append(f"| {config} | {world} | {T_rank} ({T_rank * world}) | {_ms(one)} | "
                    + " | ".join(cells) + " |")
    return "\n".join(rows)
