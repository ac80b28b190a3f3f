"""Main demo: which positional encodings let a small transformer copy longer sequences?

Trains the decoder-only transformer of ``transformer.py`` once per encoding on the copy
task of ``copy_task.py`` (n <= n_train symbols), evaluates answer accuracy at
n = 1x, 2x and 4x n_train, prints a table and saves PNGs into ``--out``:

* ``learning_curves.png``: training loss per step;
* ``accuracy_vs_length.png``: answer accuracy against the number of copied symbols;
* ``sinusoidal_heatmap.png``, ``rope_score_vs_distance.png``, ``alibi_bias.png``,
  ``t5_bias.png``: the encodings themselves (``encoding_plots.py``).

The rows: no encoding, sinusoidal, learned, RoPE (and RoPE with linear / YaRN
scaling switched on at evaluation), ALiBi, T5 buckets, FIRE, Kerple (logarithmic),
CoPE, and RoPE trained at randomized positions or PoSE's skip-wise positions over
the whole evaluated range (see ``transformer.py``). Every row trains with the same
budget, optimiser and seed.

The results are whatever the run produces: nothing is tuned per encoding.

Run: ``python examples/demo.py --out out/`` (``--quick`` for CI, ``--encodings rope
alibi`` for a subset).
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import time

import matplotlib

matplotlib.use("Agg")
import encoding_plots
import matplotlib.pyplot as plt
import numpy as np
from training import (
    TrainConfig,
    Trained,
    evaluate,
    train_encodings,
)
from transformer import ENCODINGS, ROPE_ENCODINGS

FACTORS = (1, 2, 4)
QUICK = TrainConfig(steps=40, batch_size=16, n_train=4, eval_batch_size=32)


def format_table(runs: list[Trained], accuracy: dict[str, dict[int, float]]) -> str:
    """The results as a Markdown table."""
    header = ["encoding", "params", "train loss"]
    header += [f"acc@{f}x" for f in FACTORS] + ["steps/s"]
    rows = [header, ["---"] * len(header)]
    for r in runs:
        loss = float(np.mean(r.losses[-max(1, len(r.losses) // 20) :]))
        rows.append(
            [r.encoding, f"{r.params:,}", f"{loss:.4f}"]
            + [f"{accuracy[r.encoding][f]:.3f}" for f in FACTORS]
            + [f"{r.steps_per_s:.1f}"]
        )
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def plot_learning_curves(runs: list[Trained], path: pathlib.Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in runs:
        if r.encoding in ROPE_ENCODINGS[1:]:
            continue  # the same curve as rope
        window = max(1, len(r.losses) // 50)
        smooth = np.convolve(r.losses, np.ones(window) / window, mode="valid")
        ax.plot(np.arange(len(smooth)) + window - 1, smooth, label=r.encoding)
    ax.set(
        xlabel="step",
        ylabel="answer cross-entropy",
        yscale="log",
        title="training loss (moving average)",
    )
    ax.legend()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def plot_accuracy(
    accuracy: dict[str, dict[int, float]], n_train: int, path: pathlib.Path
) -> None:
    """Accuracy against the number of copied symbols, one line per encoding (line
    styles and markers cycle so that 13 lines stay apart)."""
    fig, ax = plt.subplots(figsize=(8, 5))
    styles, markers = ("-", "--", ":", "-."), "os^vDP*Xph<>d"
    for i, (encoding, by_factor) in enumerate(accuracy.items()):
        ax.plot(
            [f * n_train for f in FACTORS],
            [by_factor[f] for f in FACTORS],
            linestyle=styles[i % len(styles)],
            marker=markers[i % len(markers)],
            label=encoding,
        )
    ax.axvline(n_train, color="gray", linestyle=":", label="trained up to")
    ax.set(
        xlabel="symbols to copy (n)",
        ylabel="answer token accuracy",
        ylim=(-0.02, 1.02),
        title="length generalisation",
    )
    ax.set_xticks([f * n_train for f in FACTORS], [str(f * n_train) for f in FACTORS])
    ax.legend(fontsize="small", ncol=2)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def main() -> None:
    start = time.perf_counter()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("out"))
    parser.add_argument("--quick", action="store_true", help="tiny run, for CI")
    parser.add_argument(
        "--encodings", nargs="+", choices=ENCODINGS, default=list(ENCODINGS)
    )
    parser.add_argument("--steps", type=int, help="training steps per encoding")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args()
    train = QUICK if args.quick else TrainConfig()
    train = dataclasses.replace(train, seed=args.seed)
    if args.steps:
        train = dataclasses.replace(train, steps=args.steps)
    args.out.mkdir(parents=True, exist_ok=True)

    runs = train_encodings(
        args.encodings, train, max_factor=max(FACTORS), progress=not args.no_progress
    )
    accuracy = {r.encoding: evaluate(r.model, train, FACTORS) for r in runs}

    table = format_table(runs, accuracy)
    print()
    print(
        f"copy task: trained on n <= {train.n_train} symbols for {train.steps} "
        f"steps (batch {train.batch_size}); accuracy = teacher-forced answer "
        f"tokens at n = {', '.join(str(f * train.n_train) for f in FACTORS)}"
    )
    print(table)
    if sum(r.encoding in ROPE_ENCODINGS for r in runs) > 1:
        print(
            "rope_linear / rope_yarn reuse the rope weights (RoPE scaling only "
            "changes evaluation), hence the same loss and steps/s."
        )
    (args.out / "results.md").write_text(table + "\n")
    plot_learning_curves(runs, args.out / "learning_curves.png")
    plot_accuracy(accuracy, train.n_train, args.out / "accuracy_vs_length.png")
    saved = encoding_plots.save_all(
        args.out,
        train_len=2 * train.n_train,
        trained={r.encoding: r.model for r in runs},
    )
    print(f"saved results.md, learning_curves.png, accuracy_vs_length.png, {saved}")
    print(f"into {args.out}/; total time {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
