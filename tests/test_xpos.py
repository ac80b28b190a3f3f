"""xPos against float64 transcriptions: torchscale's ``XPOS`` module and the paper's
formula in complex form; relative-position and decay properties.

Tolerances: a float32 angle ``p * inv_freq`` is off by up to ``angle * (1e-6 + 2^-23)``
and cos/sin add ``2^-22``, as in ``tests/test_hf_parity.py``; the xPos factor is
``exp`` of a float32 product (relative error a few ulps of its exponent), so a feature
may be off by ``2 max|x| * max(factor) * (that + exponent * 2^-22)``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import normal
from hypothesis import given
from hypothesis import strategies as st

import flax_posenc as fp


def torchscale_xpos(x, offset, downscale, scale_base=512.0, theta=10000.0):
    """float64 transcription of torchscale's ``XPOS.forward(x, offset, downscale)``.

    ``x`` is ``[B, L, N, H]`` (torchscale: ``[B * N, L, H]``); positions are
    ``offset .. offset + L - 1`` for the rotation and centred for the scale.
    """
    length, head_dim = x.shape[1], x.shape[-1]
    zeta = (np.arange(0, head_dim, 2) + 0.4 * head_dim) / (1.4 * head_dim)
    min_pos = -(length + offset) // 2
    max_pos = length + offset + min_pos
    scale = zeta ** (np.arange(min_pos, max_pos)[:, None] / scale_base)
    seq_len, dim = scale.shape
    inv_freq = 1.0 / theta ** (np.arange(dim) / dim)
    sinusoid = np.arange(seq_len, dtype=np.float64)[:, None] * inv_freq
    sin, cos = np.sin(sinusoid)[-length:], np.cos(sinusoid)[-length:]
    scale = scale[-length:]
    if downscale:
        scale = 1.0 / scale
    sin = np.repeat(sin * scale, 2, axis=-1)[:, None, :]  # duplicate_interleave
    cos = np.repeat(cos * scale, 2, axis=-1)[:, None, :]
    x = np.asarray(x, np.float64)
    every_two = np.stack([-x[..., 1::2], x[..., ::2]], axis=-1).reshape(x.shape)
    return x * cos + every_two * sin


def xpos_complex64(x, positions, center, config, *, is_key, scale_base, gamma):
    """The paper's formula with pairs as complex numbers: ``z_i e^(i theta_i p)
    zeta_i^(+-(p - c)/b)``."""
    rotary = config.rotated_features
    x = np.asarray(x, np.float64)
    if config.layout == "half":
        z = x[..., : rotary // 2] + 1j * x[..., rotary // 2 : rotary]
    else:
        z = x[..., 0:rotary:2] + 1j * x[..., 1:rotary:2]
    i = np.arange(rotary // 2)
    theta = config.theta ** (-2.0 * i / rotary)
    zeta = (2.0 * i / rotary + gamma) / (1.0 + gamma)
    p = np.asarray(positions, np.float64)[..., None, None]
    exponent = (p - center) / scale_base * (-1.0 if is_key else 1.0)
    z = z * np.exp(1j * theta * p) * zeta**exponent
    out = x.copy()
    if config.layout == "half":
        out[..., : rotary // 2], out[..., rotary // 2 : rotary] = z.real, z.imag
    else:
        out[..., 0:rotary:2], out[..., 1:rotary:2] = z.real, z.imag
    return out, np.max(zeta ** np.abs(exponent))


def allowance(x, max_angle, max_factor, max_exponent):
    return (
        2
        * np.max(np.abs(x))
        * max_factor
        * (max_angle * (1e-6 + 2**-23) + 2**-22 + max_exponent * 2**-22)
    )


apply_xpos_jit = jax.jit(
    fp.apply_xpos, static_argnums=2, static_argnames=("is_key", "scale_base", "gamma")
)


@pytest.mark.parametrize("is_key", [False, True])
@pytest.mark.parametrize(
    ("length", "offset"),
    [(16, 0), pytest.param(1, 1023, marks=pytest.mark.slow), (8, 1100)],
)
def test_matches_torchscale(length, offset, is_key):
    """torchscale's prefill (offset 0) and decode (one query after a long cache)."""
    config = fp.RopeConfig(head_dim=32, layout="interleaved")
    x = normal((2, length, 2, 32), seed=0)
    total = length + offset
    got = apply_xpos_jit(
        x,
        offset + jnp.arange(length),
        config,
        is_key=is_key,
        center=jnp.asarray((total + 1) // 2),
    )
    expected = torchscale_xpos(x, offset, is_key)
    max_factor = (0.4 / 1.4) ** (-(total // 2 + 1) / 512)
    tol = allowance(x, total, max_factor, (total // 2 + 1) / 512 * 1.26)
    np.testing.assert_allclose(got, expected, atol=tol, rtol=0)


@pytest.mark.parametrize("is_key", [False, True])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_matches_complex_formula_partial_rotary(layout, is_key):
    config = fp.RopeConfig(head_dim=24, theta=500.0, rotary_dim=16, layout=layout)
    rng = np.random.default_rng(1)
    positions = jnp.asarray(rng.integers(-300, 900, (2, 6)), jnp.int32)
    center = jnp.asarray([[100], [-20]])
    x = normal((2, 6, 3, 24), seed=2)
    got = apply_xpos_jit(
        x, positions, config, is_key=is_key, scale_base=256.0, gamma=0.2, center=center
    )
    expected, max_factor = xpos_complex64(
        x,
        positions,
        np.asarray(center)[..., None, None],
        config,
        is_key=is_key,
        scale_base=256.0,
        gamma=0.2,
    )
    max_offset = np.max(np.abs(np.asarray(positions) - np.asarray(center)))
    tol = allowance(x, np.max(np.abs(positions)), max_factor, max_offset / 256 * 1.8)
    np.testing.assert_allclose(got, expected, atol=tol, rtol=0)


@pytest.mark.parametrize("is_key", [False, True])
def test_at_the_centre_xpos_is_rope_bitwise(is_key):
    config = fp.RopeConfig(head_dim=16, rotary_dim=12)
    positions = jnp.asarray([[0, 5, 77, 4000]])
    x = normal((1, 4, 2, 16), seed=3)
    xpos = apply_xpos_jit(x, positions, config, is_key=is_key, center=positions)
    np.testing.assert_array_equal(
        xpos, jax.jit(fp.apply_rope, static_argnums=2)(x, positions, config)
    )


SHIFT_CONFIG = fp.RopeConfig(head_dim=16, layout="interleaved")
QK = normal((2, 1, 12, 2, 16), seed=4)
POSITIONS = np.arange(12)


@jax.jit
def xpos_scores(positions, center):
    q = fp.apply_xpos(QK[0], positions, SHIFT_CONFIG, is_key=False, center=center)
    k = fp.apply_xpos(QK[1], positions, SHIFT_CONFIG, is_key=True, center=center)
    return jnp.einsum("bmnh,blnh->bnml", q, k, precision="highest")


@given(shift=st.integers(-3000, 3000), center=st.integers(-3000, 3000))
def test_scores_depend_only_on_relative_position(shift, center):
    """Shifting every position (or moving the centre) leaves every q_m . k_n."""
    base = np.asarray(xpos_scores(jnp.asarray(POSITIONS), jnp.asarray(0)), np.float64)
    moved = np.asarray(
        xpos_scores(jnp.asarray(POSITIONS + shift), jnp.asarray(center)), np.float64
    )
    norms = np.einsum(
        "bmn,bln->bnml",
        np.linalg.norm(np.asarray(QK[0]), axis=-1),
        np.linalg.norm(np.asarray(QK[1]), axis=-1),
    )
    largest = np.max(np.abs(POSITIONS + shift)) + abs(center)
    # |m - n| <= 11: the decay factors stay within 1.03 of 1; float32 angles and
    # exponents up to `largest` give 32 ulps per score, as assert_shift_invariance.
    np.testing.assert_array_less(
        np.abs(moved - base), 1.03 * norms * (1e-6 + 2.0**-19 * largest)
    )


def test_scores_of_identical_q_k_decay_with_distance():
    """For q = k drawn isotropically, E[q_m . k_n] is the score of a vector with equal
    pair norms (all ones): ``2 sum_i zeta_i^(d/b) cos(d theta_i)``, d = m - n. Its
    mean over windows of 512 distances falls strictly with the distance; plain RoPE's
    does not (its long-range decay is only an envelope)."""
    head_dim, count = 64, 4096
    config = fp.RopeConfig(head_dim=head_dim, layout="interleaved")
    x = jnp.ones((count, 1, head_dim))
    positions = jnp.arange(count)

    @jax.jit
    def last_query_scores(x):
        q = fp.apply_xpos(x, positions, config, is_key=False, center=count // 2)
        k = fp.apply_xpos(x, positions, config, is_key=True, center=count // 2)
        rope = fp.apply_rope(x, positions, config)
        dot = lambda a, b: jnp.einsum("nh,h->n", a[:, 0], b[-1, 0], precision="highest")
        return dot(k, q)[::-1], dot(rope, rope)[::-1]  # index d: key at count-1-d

    xpos, rope = (np.asarray(s, np.float64) for s in last_query_scores(x))
    i = np.arange(head_dim // 2)
    zeta = (2.0 * i / head_dim + 0.4) / 1.4
    d = np.arange(count)[:, None]
    expected = 2 * np.sum(
        zeta ** (d / 512) * np.cos(d * 10000.0 ** (-2.0 * i / head_dim)), -1
    )
    # angles up to 4096 rad: 64 features each within 2 * 150 * 4096 * 2^-22 of truth
    np.testing.assert_allclose(xpos, expected, atol=0.05 * head_dim, rtol=0)
    xpos_windows = xpos.reshape(-1, 512).mean(-1)
    rope_windows = rope.reshape(-1, 512).mean(-1)
    assert np.all(np.diff(xpos_windows) < 0), xpos_windows
    assert not np.all(np.diff(rope_windows) < 0), rope_windows
    assert xpos_windows[-1] < 0.2 * xpos_windows[0]


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_keeps_dtype(dtype):
    config = fp.RopeConfig(head_dim=16)
    x = normal((2, 8, 2, 16), seed=5)
    positions = jnp.arange(8) + 300
    got = apply_xpos_jit(x.astype(dtype), positions, config, is_key=True)
    assert got.dtype == dtype
    reference = apply_xpos_jit(x, positions, config, is_key=True)
    # input and output each rounded once; factors up to 3.5^(307/512) < 2.2
    atol = 4 * 2.2 * float(jnp.finfo(dtype).eps) * float(np.max(np.abs(x)))
    np.testing.assert_allclose(np.asarray(got, np.float32), reference, atol=atol)


BAD_INPUTS = [
    ({"positions": jnp.zeros(8)}, TypeError, "`positions`"),
    ({"x": jnp.zeros((2, 8, 2, 8))}, ValueError, "`x`"),
    ({"positions": jnp.zeros(5, jnp.int32)}, ValueError, "`positions`"),
    ({"is_key": "k"}, TypeError, "`is_key`"),
    ({"is_key": 1}, TypeError, "`is_key`"),
    ({"scale_base": 0.0}, ValueError, "`scale_base`"),
    ({"gamma": -0.4}, ValueError, "`gamma`"),
    ({"center": 2.5}, TypeError, "`center`"),
    ({"center": jnp.zeros(3, jnp.int32)}, ValueError, "`center`"),
]


@pytest.mark.parametrize(("change", "error", "match"), BAD_INPUTS)
def test_rejects_bad_inputs(change, error, match):
    args = {
        "x": jnp.zeros((2, 8, 2, 16)),
        "positions": jnp.arange(8),
        "is_key": False,
        "scale_base": 512.0,
        "gamma": 0.4,
        "center": 0,
    } | change
    x, positions = args.pop("x"), args.pop("positions")
    with pytest.raises(error, match=match):
        fp.apply_xpos(x, positions, fp.RopeConfig(head_dim=16), **args)
