"""Pictures of the encodings the demo trains (saved by ``demo.py``).

* ``sinusoidal_heatmap.png``: the sinusoidal table PE[p, d];
* ``rope_score_vs_distance.png``: the RoPE attention score between a query and a key
  with the same content, against their distance, unscaled and with the evaluation-time
  scaling families (the long-term decay of RoFormer, section 3.4.3);
* ``alibi_bias.png``: ALiBi's bias for the last query against every key, per head;
* ``t5_bias.png``: the T5 bias the ``t5`` model learned, per head, against distance.
"""

from __future__ import annotations

import pathlib

import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import plot_sinusoidal

import flax_posenc as fp


def plot_rope_score(head_dim: int = 64, factor: float = 4.0, original: int = 256):
    """``<R(d) q, R(0) k> / H`` for ``q = k = 1`` against the distance ``d``.

    Unscaled RoPE, and linear / YaRN scaling by ``factor`` for a model trained on
    ``original`` positions: both stretch the curve (YaRN keeps the fast dimensions,
    and multiplies the scores by its attention factor squared).
    """
    distance = np.arange(0, int(4 * factor * original))
    configs = {
        "RoPE": None,
        f"linear x{factor:g}": fp.LinearScaling(factor=factor),
        f"YaRN x{factor:g}": fp.YarnScaling(
            factor=factor, original_max_position_embeddings=original
        ),
    }
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ones = jnp.ones((len(distance), 1, head_dim))
    for label, scaling in configs.items():
        config = fp.RopeConfig(head_dim=head_dim, scaling=scaling)
        q = fp.apply_rope(ones, jnp.asarray(distance), config)
        k = fp.apply_rope(ones[:1], jnp.zeros(1, jnp.int32), config)
        score = jnp.sum(q * k, axis=-1)[:, 0] / head_dim
        ax.plot(distance, np.asarray(score), label=label)
    ax.axvline(original, color="gray", linestyle=":", label="original context")
    ax.set(
        xlabel="relative distance",
        ylabel="score / head_dim",
        xscale="symlog",
        xlim=(0, distance[-1]),
        title=f"RoPE score vs distance (q = k = 1, head_dim {head_dim})",
    )
    ax.legend()
    return fig


def plot_alibi(num_heads: int = 8, length: int = 32):
    """The bias ALiBi adds to causal logits: one head's ``[L, S]`` map, and the last
    query's bias against distance for every head (the slopes ``2^(-8h/N)``)."""
    positions = jnp.arange(length)
    bias = np.asarray(fp.alibi_bias(positions, positions, num_heads))  # [N, L, S]
    causal = np.tril(np.ones((length, length), bool))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    image = left.imshow(np.where(causal, bias[0], np.nan), cmap="viridis")
    left.set(xlabel="key position", ylabel="query position", title="ALiBi bias, head 0")
    fig.colorbar(image, ax=left)
    distance = length - 1 - np.arange(length)
    for h in range(num_heads):
        right.plot(distance, bias[h, -1], label=f"head {h}")
    right.set(
        xlabel="distance q - k",
        ylabel="bias",
        title=f"ALiBi bias vs distance ({num_heads} heads)",
    )
    right.legend(fontsize="small", ncol=2)
    return fig


def plot_t5_bias(model, length: int):
    """The bias the trained ``t5`` model learned, per head, against distance."""
    positions = jnp.arange(length)
    bias = np.asarray(model.relative(positions[-1:], positions))[:, 0]  # [N, S]
    distance = length - 1 - np.arange(length)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for h, row in enumerate(bias):
        ax.plot(distance, row, label=f"head {h}")
    ax.set(
        xlabel="distance q - k",
        ylabel="learned bias",
        xscale="symlog",
        xlim=(0, length - 1),
        title=f"T5 bias learned on the copy task (up to {length} positions shown)",
    )
    ax.legend()
    return fig


def save_all(out: pathlib.Path, *, train_len: int, trained: dict) -> str:
    """Saves every picture into ``out``; ``trained`` maps encodings to trained models
    (for the learned T5 bias). Returns the saved file names, comma-separated."""
    figures = {
        "sinusoidal_heatmap.png": plot_sinusoidal.plot_table(4 * train_len, 64),
        "rope_score_vs_distance.png": plot_rope_score(),
        "alibi_bias.png": plot_alibi(),
    }
    if "t5" in trained:
        figures["t5_bias.png"] = plot_t5_bias(trained["t5"], 4 * train_len)
    for name, fig in figures.items():
        fig.savefig(out / name, dpi=100, bbox_inches="tight")
        plt.close(fig)
    return ", ".join(figures)
