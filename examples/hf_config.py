"""``rope_config_from_hf`` on published model configs, and what their scaling does.

Three ``config.json`` dicts written inline (the fields RoPE reads):

* Llama 3.1 8B: ``llama3`` scaling (factor 8 over 8192 original positions);
* Qwen2.5 7B Instruct with the YaRN block its model card recommends (factor 4,
  original 32768, theta 1e6);
* Phi-3 mini 128k Instruct: LongRoPE, per-dimension ``short_factor`` (up to 4096
  positions) and ``long_factor`` (beyond).

For each it prints the parsed configuration and saves ``hf_rope_wavelengths.png``:
the effective wavelength ``2 pi / inv_freq`` of every rotary pair, scaled vs unscaled
RoPE, against the original context length (wavelengths longer than the context are
the dimensions a model never saw complete a turn).

Run: ``python examples/hf_config.py --out out/`` (``--quick`` skips nothing: it is
already fast; the flag exists so CI runs every example the same way).
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

import flax_posenc as fp

LLAMA_3_1_8B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "max_position_embeddings": 131072,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
}

QWEN_2_5_7B_YARN = {
    "model_type": "qwen2",
    "hidden_size": 3584,
    "num_attention_heads": 28,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rope_scaling": {
        "type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 32768,
    },
}

# LongRoPE factor lists of microsoft/Phi-3-mini-128k-instruct, as in
# tests/fixtures/hf_rope.json (case longrope_phi3_mini_128k_long).
# fmt: off
PHI_3_LONG_FACTOR = [
    1.0700000524520874, 1.1200000047683716, 1.149999976158142,
    1.4199999570846558, 1.5699999332427979, 1.7999999523162842,
    2.129999876022339, 2.129999876022339, 3.009999990463257,
    5.910000324249268, 6.950000286102295, 9.070000648498535,
    9.930000305175781, 10.710000038146973, 11.130000114440918,
    14.609999656677246, 15.409998893737793, 19.809999465942383,
    37.279998779296875, 38.279998779296875, 38.599998474121094,
    40.12000274658203, 46.20000457763672, 50.940006256103516,
    53.66000747680664, 54.9373893737793, 56.89738845825195,
    57.28738784790039, 59.98738479614258, 60.86738586425781,
    60.887386322021484, 61.71739196777344, 62.91739273071289,
    62.957393646240234, 63.41739273071289, 63.8173942565918,
    63.83739471435547, 63.897396087646484, 63.93739700317383,
    64.06739807128906, 64.11434936523438, 64.12435150146484,
    64.15435028076172, 64.19435119628906, 64.24435424804688,
    64.57435607910156, 64.69000244140625, 64.76000213623047,
]
PHI_3_SHORT_FACTOR = [
    1.1, 1.1, 1.1, 1.3000000000000003, 1.3500000000000003,
    1.3500000000000003, 1.4000000000000004, 1.5500000000000005,
    2.000000000000001, 2.000000000000001, 2.000000000000001,
    2.000000000000001, 2.000000000000001, 2.000000000000001,
    2.000000000000001, 2.000000000000001, 2.000000000000001,
    2.000000000000001, 2.000000000000001, 2.000000000000001,
    2.000000000000001, 2.000000000000001, 2.000000000000001,
    2.000000000000001, 2.000000000000001, 2.0500000000000007,
    2.0500000000000007, 2.0500000000000007, 2.0500000000000007,
    2.0500000000000007, 2.0500000000000007, 2.1000000000000005,
    2.1000000000000005, 2.1500000000000004, 2.25, 2.25, 2.25, 2.25,
    2.25, 2.3999999999999995, 2.4499999999999993, 2.499999999999999,
    2.6999999999999984, 2.6999999999999984, 2.7499999999999982,
    2.799999999999998, 2.8999999999999977, 3.049999999999997,
]
# fmt: on

PHI_3_MINI_128K = {
    "model_type": "phi3",
    "hidden_size": 3072,
    "num_attention_heads": 32,
    "max_position_embeddings": 131072,
    "original_max_position_embeddings": 4096,
    "rope_theta": 10000.0,
    "rope_scaling": {
        "type": "longrope",
        "long_factor": PHI_3_LONG_FACTOR,
        "short_factor": PHI_3_SHORT_FACTOR,
    },
}


@dataclasses.dataclass(frozen=True)
class Case:
    """A published config and the sequence lengths whose frequencies to show."""

    name: str
    config: dict
    original: int
    seq_lens: tuple[int | None, ...] = (None,)


CASES = (
    Case("Llama 3.1 8B (llama3)", LLAMA_3_1_8B, 8192),
    Case("Qwen2.5 7B (YaRN x4)", QWEN_2_5_7B_YARN, 32768),
    # LongRoPE: short_factor up to the original 4096 positions, long_factor beyond.
    Case("Phi-3 mini 128k (LongRoPE)", PHI_3_MINI_128K, 4096, (4096, 131072)),
)


def describe(config: fp.RopeConfig) -> str:
    """The config on one line, factor lists shortened to their length."""
    scaling = config.scaling
    fields = ", ".join(
        f"{f.name}=[{len(v)} values]" if isinstance(v, tuple) else f"{f.name}={v}"
        for f in dataclasses.fields(scaling)
        if (v := getattr(scaling, f.name)) is not None
    )
    return (
        f"RopeConfig(head_dim={config.head_dim}, theta={config.theta:g}, "
        f"rotary_dim={config.rotated_features}, layout={config.layout!r}, "
        f"scaling={type(scaling).__name__}({fields}))"
    )


def wavelengths(config: fp.RopeConfig, seq_len: int | None) -> tuple[np.ndarray, float]:
    """``2 pi / inv_freq`` per rotary pair, and the attention scaling."""
    inv_freq, attention_scaling = fp.rope_frequencies(config, seq_len=seq_len)
    return 2 * np.pi / np.asarray(inv_freq, np.float64), float(attention_scaling)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("out"))
    parser.add_argument("--quick", action="store_true", help="for CI (same output)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    fig, axes = plt.subplots(1, len(CASES), figsize=(5 * len(CASES), 4.5))
    for case, ax in zip(CASES, axes, strict=True):
        config = fp.rope_config_from_hf(case.config)
        print(f"{case.name}:\n  {describe(config)}")
        plain = dataclasses.replace(config, scaling=None)
        base, _ = wavelengths(plain, None)
        ax.plot(base, label="unscaled RoPE", color="black", linestyle="--")
        for seq_len in case.seq_lens:
            scaled, attention_scaling = wavelengths(config, seq_len)
            suffix = "" if seq_len is None else f", seq_len {seq_len}"
            print(
                f"  {type(config.scaling).__name__}{suffix}: attention scaling "
                f"{attention_scaling:.4f}, wavelengths {scaled.min():.3g} .. "
                f"{scaled.max():.3g} (unscaled {base.min():.3g} .. {base.max():.3g})"
            )
            ax.plot(scaled, label=f"scaled{suffix}")
        ax.axhline(case.original, color="gray", linestyle=":", label="original context")
        ax.set(
            title=case.name,
            xlabel="rotary pair i",
            ylabel="wavelength 2π / inv_freq (positions)",
            yscale="log",
        )
        ax.legend(fontsize="small")
    path = args.out / "hf_rope_wavelengths.png"
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    print(f"saved {path}")


if __name__ == "__main__":
    main()
