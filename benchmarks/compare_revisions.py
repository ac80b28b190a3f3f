"""The figures of ``benchmarks/compare_revisions.sh`` side by side: for each, the base
revision and the working tree in each round, as a markdown table.

Run: ``python benchmarks/compare_revisions.py OUT_DIR`` (the script runs it at its end).
"""

import json
import pathlib
import sys

out = pathlib.Path(sys.argv[1])
runs = [("base-tree", 1), ("main", 1), ("base-tree", 2), ("main", 2)]


def load(name):
    return [json.loads((out / f"{name}.{t}.{r}.json").read_text()) for t, r in runs]


def row(label, values, fmt="{:.3g}"):
    print(f"| {label} | " + " | ".join(fmt.format(v) for v in values) + " |")


print("| figure | base 1 | head 1 | base 2 | head 2 |\n| --- | --- | --- | --- | --- |")
rope = load("rope_benchmark")
for i, (label, *_rest) in enumerate(rope[0]["targets"]):
    row(label, [r["targets"][i][1] for r in rope], "{:.2f}")
for case in ("blockwise", "blockwise grad"):
    row(
        f"blockwise [1, 512, 4, 64] {case} ms",
        [r["blockwise"]["results"][case]["median_ms"] for r in rope],
        "{:.2f}",
    )
    row(
        f"blockwise [1, 512, 4, 64] {case} temp MiB",
        [r["blockwise"]["results"][case]["temp_bytes"] / 2**20 for r in rope],
        "{:.2f}",
    )
for kind in ("forward", "grad"):
    row(
        f"blockwise long temp MiB, {kind}",
        [r["blockwise"]["long_temp_bytes"][kind] / 2**20 for r in rope],
        "{:.1f}",
    )
ring = load("ring_benchmark")
for i, case in enumerate(ring[0]):
    label = (
        f"ring n={case['n']} L={case['L']} {'grad' if case['grad'] else 'fwd'} temp MiB"
    )
    row(label, [r[i]["temp"] / 2**20 for r in ring], "{:.2f}")
length = load("length_generalisation_benchmark")
for name in length[0]["results"]:
    row(
        f"{name} L=4096 time / ALiBi",
        [r["results"][name]["time_ratio"] for r in length],
        "{:.2f}",
    )
    row(
        f"{name} L=4096 temp / ALiBi",
        [r["results"][name]["memory_ratio"] for r in length],
        "{:.2f}",
    )
row(
    "ALiBi L=4096 median s",
    [r["results"]["alibi"]["median_s"] for r in length],
    "{:.3f}",
)
row(
    "ALiBi L=4096 temp MiB",
    [r["results"]["alibi"]["temp_bytes"] / 2**20 for r in length],
    "{:.1f}",
)
