"""Renders the pictures of the docs' guide pages into ``docs/figures/``.

Run from the repository root: ``python docs/make_figures.py``. Each PNG is small
(a few tens of KB); they are committed, so building the docs needs no matplotlib.
"""

from __future__ import annotations

import pathlib

import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

import flax_posenc as fp

OUT = pathlib.Path(__file__).parent / "figures"
DPI = 80


def save(fig, name: str) -> None:
    fig.savefig(OUT / name, dpi=DPI, bbox_inches="tight", pil_kwargs={"optimize": True})
    plt.close(fig)
    print(f"{OUT / name}: {(OUT / name).stat().st_size // 1024} KB")


def sinusoidal() -> None:
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for ax, layout in zip(axes, ("interleaved", "half"), strict=True):
        table = np.asarray(fp.sinusoidal_table(64, 32, layout=layout))
        ax.imshow(table, aspect="auto", cmap="RdBu", vmin=-1, vmax=1)
        ax.set(title=f'layout="{layout}"', xlabel="feature d", ylabel="position p")
    save(fig, "sinusoidal.png")


def rope() -> None:
    """inv_freq of each scaling family, and the RoPE score against distance."""
    head_dim, original = 128, 4096
    families = {
        "none": None,
        "linear x4": fp.LinearScaling(factor=4.0),
        "NTK factor=4": fp.NTKScaling(factor=4.0),
        "YaRN x4": fp.YarnScaling(
            factor=4.0, original_max_position_embeddings=original
        ),
        "Llama 3 x8": fp.Llama3Scaling(
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=original,
        ),
    }
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.2))
    for name, scaling in families.items():
        config = fp.RopeConfig(head_dim=head_dim, theta=10000.0, scaling=scaling)
        inv_freq = np.asarray(fp.rope_frequencies(config).inv_freq)
        left.semilogy(inv_freq, label=name)
    left.set(title="inv_freq per pair", xlabel="pair i", ylabel="inv_freq[i]")
    left.legend(fontsize=7)
    config = fp.RopeConfig(head_dim=head_dim)
    distance = np.arange(512)
    q = jnp.ones((1, 1, head_dim))  # [L, N, H]
    k = fp.apply_rope(jnp.ones((512, 1, head_dim)), jnp.asarray(distance), config)
    q = fp.apply_rope(q, jnp.zeros(1, jnp.int32), config)
    score = np.asarray(k[:, 0] @ q[0, 0]) / head_dim
    right.plot(distance, score)
    right.set(title="q(0) . k(m), all-ones q, k", xlabel="distance m", ylabel="score")
    save(fig, "rope.png")


def context_extension() -> None:
    """Per-pair frequency ratio of each recipe, and the turns each pair makes."""
    original, target = 4096, 32768
    base = fp.RopeConfig(head_dim=128, theta=10000.0)
    trained = fp.rope_wavelengths(base, seq_len=original)
    unscaled = fp.rope_wavelengths(base, seq_len=target)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    x = trained.wavelength / original
    for method in ("linear", "ntk", "dynamic", "yarn", "llama3"):
        config = fp.extend_context(
            base, target, method=method, original_max_position_embeddings=original
        )
        waves = fp.rope_wavelengths(config, seq_len=target)
        left.loglog(x, trained.wavelength / waves.wavelength, label=method)
        right.semilogy(waves.rotations, label=method)
    right.semilogy(unscaled.rotations, "k:", lw=1.2, label=f"none, in {target}")
    right.semilogy(trained.rotations, "k--", lw=1.2, label=f"none, in {original}")
    for edge, name in ((1 / 32, "YaRN beta_fast"), (1 / 4, "Llama 3 high")):
        left.axvline(edge, color="gray", lw=0.6, ls=":")
        left.text(edge * 1.15, 0.011, name, fontsize=7, color="gray", rotation=90)
    left.axvline(1.0, color="gray", lw=0.6)
    left.text(1.3, 0.35, "original length\n(YaRN beta_slow,\nLlama 3 low)", fontsize=7)
    left.set(
        title=f"inv_freq scaled / original ({original} -> {target})",
        xlabel="original wavelength / original length",
        ylabel="frequency ratio",
        ylim=(0.008, 1.5),
    )
    left.legend(fontsize=7, loc="lower left")
    right.axhline(1.0, color="gray", lw=0.6)
    right.set(
        title=f"turns within {target} tokens (1 turn: gray)",
        xlabel="pair j",
        ylabel="length / wavelength",
    )
    right.legend(fontsize=7)
    save(fig, "context_extension.png")


def alibi() -> None:
    bias = np.asarray(fp.alibi_bias(jnp.arange(16), jnp.arange(16), 8))
    fig, axes = plt.subplots(1, 4, figsize=(9, 2.4))
    for ax, head in zip(axes, (0, 2, 5, 7), strict=True):
        ax.imshow(bias[head], cmap="viridis")
        ax.set(title=f"head {head + 1}: slope 2^-{head + 1}", xticks=[], yticks=[])
        ax.title.set_fontsize(8)
    axes[0].set(ylabel="query i", xlabel="key j")
    save(fig, "alibi.png")


def relative() -> None:
    r = np.arange(-160, 161)
    fig, ax = plt.subplots(figsize=(7, 3))
    for bidirectional in (True, False):
        bucket = fp.relative_position_bucket(
            jnp.asarray(r), bidirectional=bidirectional
        )
        ax.plot(r, np.asarray(bucket), label=f"bidirectional={bidirectional}")
    ax.axvline(128, color="gray", lw=0.5)
    ax.axvline(-128, color="gray", lw=0.5)
    ax.set(xlabel="relative position k - q", ylabel="bucket", title="T5 buckets (32)")
    ax.legend(fontsize=8)
    save(fig, "relative.png")


def positions() -> None:
    rows = {
        "packed": fp.positions_from_segment_ids(
            jnp.array([1, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3, 0, 0])
        ),
        "left-padded": fp.positions_from_padding_mask(jnp.arange(14) >= 5),
        "right-padded": fp.positions_from_padding_mask(jnp.arange(14) < 9),
        "decode step": jnp.concatenate(
            [fp.positions_from_offsets(9, 1), jnp.full((13,), -1)]
        ),
    }
    table = np.stack([np.asarray(v) for v in rows.values()])
    fig, ax = plt.subplots(figsize=(7, 2.2))
    ax.imshow(np.ma.masked_less(table, 0), cmap="Blues", vmin=-2, vmax=12)
    for (i, j), value in np.ndenumerate(table):
        if value >= 0:
            ax.text(j, i, str(value), ha="center", va="center", fontsize=8)
    ax.set(yticks=range(len(rows)), yticklabels=list(rows), xlabel="token index")
    save(fig, "positions.png")


def context_parallel() -> None:
    """Causal (query chunk, key chunk) pairs over 4 devices, 8 chunks: who computes
    each, plain split against the load-balanced layout, and the per-device count."""
    devices = 4
    chunks = 2 * devices
    perm = fp.load_balanced_permutation(chunks, devices)  # one token per chunk
    layouts = {"plain split": np.arange(chunks), "load-balanced": perm}
    fig, axes = plt.subplots(1, 3, figsize=(9, 2.8), width_ratios=(1, 1, 0.9))
    colors = plt.get_cmap("tab10")(np.arange(devices))
    counts = {}
    for ax, (name, order) in zip(axes[:2], layouts.items(), strict=True):
        owner = np.empty(chunks, int)
        owner[order] = np.arange(chunks) // 2  # chunk order[j] sits on device j // 2
        grid = np.ones((chunks, chunks, 4))
        for q in range(chunks):
            for k in range(q + 1):
                grid[q, k] = colors[owner[q]]
        ax.imshow(grid)
        ax.set(title=name, xlabel="key chunk", ylabel="query chunk")
        ax.set(xticks=range(chunks), yticks=range(chunks))
        ax.title.set_fontsize(9)
        counts[name] = [
            sum(q + 1 for q in range(chunks) if owner[q] == d) for d in range(devices)
        ]
    width = 0.38
    for i, (name, count) in enumerate(counts.items()):
        axes[2].bar(np.arange(devices) + (i - 0.5) * width, count, width, label=name)
    axes[2].set(xlabel="device", ylabel="causal chunk pairs", xticks=range(devices))
    axes[2].legend(fontsize=7)
    save(fig, "context_parallel.png")


def main() -> None:
    OUT.mkdir(exist_ok=True)
    sinusoidal()
    rope()
    context_extension()
    alibi()
    relative()
    positions()
    context_parallel()


if __name__ == "__main__":
    main()
