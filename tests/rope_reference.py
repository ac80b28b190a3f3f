"""float64 numpy truth for RoPE, transcribed from the papers, and the scaling
configurations the RoPE tests share.

Nothing here imports the code under test except the config dataclasses, whose fields
are read as plain numbers.
"""

import dataclasses
import math

import jax.numpy as jnp
import numpy as np
import pytest

import flax_posenc as fp

ORIGINAL = 2048  # the "pre-training length" of every scaling family below
FAMILIES = (
    "plain",
    "linear",
    "ntk",
    "dynamic_ntk",
    "yarn",
    "yarn_mscale",
    "yarn_untruncated",
    "longrope",
    "llama3",
    "proportional",
    "resonance",
    "resonance_yarn",
)
SEQ_LEN_FAMILIES = ("dynamic_ntk", "longrope")
# What a test over every family runs by default: one of each kind (none, an attention
# factor, seq_len-dependent, per frequency band); FAMILY_PARAMS: the rest under `slow`.
SAMPLED_FAMILIES = ("plain", "yarn", "dynamic_ntk", "longrope", "llama3")
FAMILY_PARAMS = [
    f if f in SAMPLED_FAMILIES else pytest.param(f, marks=pytest.mark.slow)
    for f in FAMILIES
]


def make_scaling(family, rotary_dim, original=ORIGINAL):
    """One scaling of each family (several for YaRN), sized for ``rotary_dim``."""
    half = rotary_dim // 2
    return {
        "plain": lambda: None,
        "linear": lambda: fp.LinearScaling(factor=4.0),
        "ntk": lambda: fp.NTKScaling(factor=4.0),
        "dynamic_ntk": lambda: fp.DynamicNTKScaling(
            factor=4.0, original_max_position_embeddings=original
        ),
        "yarn": lambda: fp.YarnScaling(
            factor=8.0, original_max_position_embeddings=original
        ),
        "yarn_mscale": lambda: fp.YarnScaling(
            factor=16.0,
            original_max_position_embeddings=original,
            beta_fast=16.0,
            beta_slow=2.0,
            mscale=1.0,
            mscale_all_dim=0.5,
        ),
        "yarn_untruncated": lambda: fp.YarnScaling(
            factor=4.0,
            original_max_position_embeddings=original,
            truncate=False,
            attention_factor=1.25,
        ),
        "longrope": lambda: fp.LongRopeScaling(
            short_factor=tuple(1.0 + 0.1 * i for i in range(half)),
            long_factor=tuple(1.0 + 3.0 * i for i in range(half)),
            original_max_position_embeddings=original,
            factor=16.0,
        ),
        "llama3": lambda: fp.Llama3Scaling(
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=original,
        ),
        "proportional": lambda: fp.ProportionalScaling(
            partial_rotary_factor=0.5, factor=2.0
        ),
        "resonance": lambda: fp.ResonanceScaling(),
        "resonance_yarn": lambda: fp.ResonanceScaling(
            fp.YarnScaling(factor=8.0, original_max_position_embeddings=original)
        ),
    }[family]()


def make_config(
    family, *, head_dim=16, rotary_dim=None, layout="half", original=ORIGINAL
):
    rotary_dim = head_dim if rotary_dim is None else rotary_dim
    return fp.RopeConfig(
        head_dim=head_dim,
        rotary_dim=rotary_dim,
        layout=layout,
        scaling=make_scaling(family, rotary_dim, original),
    )


def default_inv_freq(theta, rotary_dim):
    """RoFormer: ``theta_i = base^(-2i/R)``, ``i < R/2``."""
    return 1.0 / theta ** (np.arange(0, rotary_dim, 2) / rotary_dim)


def yarn_get_mscale(scale, mscale=1.0):
    """YaRN's ``sqrt(1/t) = 0.1 ln(s) + 1`` (with DeepSeek's ``mscale`` multiplier)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn(theta, rotary_dim, s):
    """YaRN (Peng et al. 2023) "NTK-by-parts" ramp on the dimension index."""
    base = default_inv_freq(theta, rotary_dim)
    orig = s.original_max_position_embeddings

    def dimension_of(rotations):  # the (real) index whose period fits `rotations` times
        return (
            rotary_dim
            * math.log(orig / (2 * math.pi * rotations))
            / (2 * math.log(theta))
        )

    low, high = dimension_of(s.beta_fast), dimension_of(s.beta_slow)
    if s.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rotary_dim - 1)
    if high == low:
        high += 0.001
    out = np.empty_like(base)
    for i in range(rotary_dim // 2):
        gamma = min(max((i - low) / (high - low), 0.0), 1.0)  # 1: interpolate fully
        out[i] = (1 - gamma) * base[i] + gamma * base[i] / s.factor
    if s.attention_factor is not None:
        attention = s.attention_factor
    elif s.mscale and s.mscale_all_dim:
        attention = yarn_get_mscale(s.factor, s.mscale) / yarn_get_mscale(
            s.factor, s.mscale_all_dim
        )
    else:
        attention = yarn_get_mscale(s.factor)
    return out, attention


def llama3(theta, rotary_dim, s):
    """Llama 3.1: wavelength bands ``< orig/high`` kept, ``> orig/low`` divided by
    ``factor``, and linearly blended in ``orig / wavelength`` between."""
    base = default_inv_freq(theta, rotary_dim)
    orig = s.original_max_position_embeddings
    out = np.empty_like(base)
    for i, f in enumerate(base):
        wavelength = 2 * math.pi / f
        if wavelength < orig / s.high_freq_factor:
            out[i] = f
        elif wavelength > orig / s.low_freq_factor:
            out[i] = f / s.factor
        else:
            smooth = (orig / wavelength - s.low_freq_factor) / (
                s.high_freq_factor - s.low_freq_factor
            )
            out[i] = (1 - smooth) * f / s.factor + smooth * f
    return out, 1.0


def resonance(inv_freq):
    """Resonance RoPE (Wang et al. 2024, Algorithm 1): for each pair, the wavelength
    ``lambda_i = 2 pi / theta_i`` is rounded to the nearest integer and
    ``theta_i' = 2 pi / round(lambda_i)``; a pair that never turns stays at 0."""
    out = np.zeros_like(inv_freq)
    for i, f in enumerate(inv_freq):
        if f > 0:
            out[i] = 2 * math.pi / round(2 * math.pi / f)
    return out


def frequencies(config, seq_len=None):
    """float64 ``(inv_freq [R/2], attention_scaling)`` of ``config`` at ``seq_len``."""
    s, rotary_dim, theta = config.scaling, config.rotated_features, config.theta
    base = default_inv_freq(theta, rotary_dim)
    exponent = rotary_dim / (rotary_dim - 2)
    if s is None:
        return base, 1.0
    if isinstance(s, fp.LinearScaling):  # PI: position p -> p / factor
        return base / s.factor, 1.0
    if isinstance(s, fp.NTKScaling):
        return default_inv_freq(theta * s.factor**exponent, rotary_dim), 1.0
    if isinstance(s, fp.DynamicNTKScaling):
        orig = s.original_max_position_embeddings
        length = orig if seq_len is None else max(seq_len, orig)
        grown = theta * (s.factor * length / orig - (s.factor - 1)) ** exponent
        return default_inv_freq(grown, rotary_dim), 1.0
    if isinstance(s, fp.YarnScaling):
        return yarn(theta, rotary_dim, s)
    if isinstance(s, fp.LongRopeScaling):
        orig = s.original_max_position_embeddings
        is_long = seq_len is not None and seq_len > orig
        ext = np.asarray(s.long_factor if is_long else s.short_factor)
        if s.attention_factor is not None:
            attention = s.attention_factor
        elif s.factor <= 1:
            attention = 1.0
        else:
            attention = math.sqrt(1 + math.log(s.factor) / math.log(orig))
        return base / ext, attention
    if isinstance(s, fp.Llama3Scaling):
        return llama3(theta, rotary_dim, s)
    if isinstance(s, fp.ProportionalScaling):
        rotating = math.floor(s.partial_rotary_factor * rotary_dim / 2)
        out = base / s.factor
        out[rotating:] = 0.0
        return out, 1.0
    if isinstance(s, fp.ResonanceScaling):
        inner, attention = frequencies(dataclasses.replace(config, scaling=s.scaling))
        return resonance(inner), attention
    raise TypeError(s)


def pair_indices(rotary_dim, layout):
    """The rotated pairs ``(a_j, b_j)``: ``(j, j + R/2)`` or ``(2j, 2j + 1)``."""
    j = np.arange(rotary_dim // 2)
    return (j, j + rotary_dim // 2) if layout == "half" else (2 * j, 2 * j + 1)


def rope(x, positions, inv_freq, attention, layout):
    """RoFormer (Su et al. 2021, eq. 34) on explicit pairs, in float64:
    ``(a, b) -> attention * (a cos - b sin, b cos + a sin)`` with angle
    ``p * inv_freq_j``; features past ``R`` pass through.

    Returns ``(out [..., L, N, H], angles [..., L, 1, R/2])``.
    """
    x = np.asarray(x, np.float64)
    a_idx, b_idx = pair_indices(2 * len(inv_freq), layout)
    angles = np.asarray(positions, np.float64)[..., None, None] * inv_freq
    cos, sin = attention * np.cos(angles), attention * np.sin(angles)
    a, b = x[..., a_idx], x[..., b_idx]
    out = x.copy()
    out[..., a_idx] = a * cos - b * sin
    out[..., b_idx] = b * cos + a * sin
    return out, angles


def assert_close_to_rope(got, x, truth, angles, attention, layout, *, angle_ulps=2):
    """Per-pair error bound of a float32-angle RoPE rounded to ``got.dtype``.

    For each pair with norm ``r`` (times ``attention``): half an ulp of the output
    dtype (``eps / 2 * r``), the float32 angle's error (``angle_ulps * 2^-24 * |angle|
    * r``: 2 for one rounding of ``inv_freq`` and one of the product) and float32
    arithmetic (``2^-21 r``). Pass-through features must be bit-identical.
    """
    rotary_dim = 2 * angles.shape[-1]
    a_idx, b_idx = pair_indices(rotary_dim, layout)
    xf = np.asarray(x, np.float64)
    radius = np.hypot(xf[..., a_idx], xf[..., b_idx]) * attention
    eps = float(jnp.finfo(got.dtype).eps)
    bound = radius * (eps / 2 + angle_ulps * 2.0**-24 * np.abs(angles) + 2.0**-21)
    err = np.abs(np.asarray(got, np.float64) - truth)
    np.testing.assert_array_less(err[..., a_idx], bound + 1e-30)
    np.testing.assert_array_less(err[..., b_idx], bound + 1e-30)
    np.testing.assert_array_equal(
        np.asarray(got[..., rotary_dim:]), np.asarray(x[..., rotary_dim:])
    )
