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


def save_all(out: pathlib.Path, *, train_len: int, trained: dict) -> str:
    """Saves every picture into ``out``; ``trained`` maps encodings to trained models
    (for the learned T5 bias). Returns the saved file names, comma-separated."""
    saved = []
    fig = plot_sinusoidal.plot_table(4 * train_len, 64)
    fig.savefig(out / "sinusoidal_heatmap.png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    saved.append("sinusoidal_heatmap.png")
    fig = plot_rope_score()
    fig.savefig(out / "rope_score_vs_distance.png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    saved.append("rope_score_vs_distance.png")
    return ", ".join(saved)
