"""Pictures of the sinusoidal encoding.

Saves two PNGs into ``--out``:

* ``sinusoidal_table.png``: the table PE[p, d] as a heatmap (positions x dimensions);
* ``sinusoidal_similarity.png``: PE(p) . PE(p + k) against the offset k, for a few p
  (the curves coincide: the dot product depends on k only).

Run: ``python examples/plot_sinusoidal.py --out out/`` (``--quick`` for a small table).
"""

from __future__ import annotations

import argparse
import pathlib

import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

import flax_posenc as fp


def plot_table(max_len: int, dim: int) -> plt.Figure:
    """The table PE[p, d] as a heatmap (positions x dimensions)."""
    table = np.asarray(fp.sinusoidal_table(max_len, dim))
    fig, ax = plt.subplots(figsize=(8, 5))
    image = ax.imshow(table, aspect="auto", cmap="RdBu", vmin=-1, vmax=1)
    ax.set(xlabel="dimension d", ylabel="position p", title="sinusoidal PE[p, d]")
    fig.colorbar(image, ax=ax)
    return fig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("out"))
    parser.add_argument("--quick", action="store_true", help="small sizes, for CI")
    parser.add_argument("--max-len", type=int, default=512)
    parser.add_argument("--dim", type=int, default=128)
    args = parser.parse_args()
    max_len, dim = (64, 32) if args.quick else (args.max_len, args.dim)
    args.out.mkdir(parents=True, exist_ok=True)

    fig = plot_table(max_len, dim)
    fig.savefig(args.out / "sinusoidal_table.png", dpi=100, bbox_inches="tight")
    plt.close(fig)

    offsets = np.arange(max_len // 2)
    fig, ax = plt.subplots(figsize=(8, 4))
    for p in (0, max_len // 8, max_len // 4):
        encoding = np.asarray(fp.sinusoidal_encoding(jnp.asarray(p + offsets), dim))
        ax.plot(offsets, encoding @ encoding[0], label=f"p = {p}")
    ax.set(xlabel="offset k", ylabel="PE(p) . PE(p + k)", title="similarity vs offset")
    ax.legend()
    fig.savefig(args.out / "sinusoidal_similarity.png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    print(f"saved {args.out / 'sinusoidal_table.png'} and sinusoidal_similarity.png")


if __name__ == "__main__":
    main()
