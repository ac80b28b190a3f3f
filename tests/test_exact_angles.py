"""Exact angles (``angle_precision="exact"``) against Python-integer truth.

The truth reduces ``p * f`` mod 2 pi in Python integers: ``f`` is the float64 value of
the family's formula, transcribed in float64 numpy by ``rope_reference.frequencies``
(not read from the library), read as the exact binary fraction it is; pi comes from
Machin's formula to 256 bits. float64 ``sin``/``cos`` of the reduced angle are then
good to 1e-16.
"""

from __future__ import annotations

import dataclasses
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rope_reference as ref
from branches import BRANCHES, run_branch
from helpers import normal
from hypothesis import given
from hypothesis import strategies as st
from jax_compat import enable_x64

import flax_posenc as fp
from flax_posenc.testing import assert_shift_invariance

_BITS = 256


def _machin_pi(bits: int) -> int:
    """``floor(pi * 2^bits)`` from ``pi = 16 atan(1/5) - 4 atan(1/239)``."""
    guard = bits + 16
    one = 1 << guard

    def atan_inverse(x: int) -> int:
        total, term, k, sign = 0, one // x, 1, 1
        while term:
            total += sign * (term // k)
            term //= x * x
            k, sign = k + 2, -sign
        return total

    return (16 * atan_inverse(5) - 4 * atan_inverse(239)) >> 16


PI = _machin_pi(_BITS)


def true_sin_cos(positions, inv_freq) -> tuple[np.ndarray, np.ndarray]:
    """float64 ``sin``/``cos`` of ``p * f`` reduced to ``[-pi, pi)`` in integers."""
    positions = np.asarray(positions)
    inv_freq = np.asarray(inv_freq, np.float64)
    sin = np.empty(positions.shape + inv_freq.shape)
    cos = np.empty_like(sin)
    for index, p in np.ndenumerate(positions):
        for j, f in enumerate(inv_freq.tolist()):
            num, den = f.as_integer_ratio()
            reduced = ((int(p) * num << _BITS) // den) % (2 * PI)
            x = (reduced - 2 * PI if reduced >= PI else reduced) / 2**_BITS
            sin[index + (j,)], cos[index + (j,)] = math.sin(x), math.cos(x)
    return sin, cos


POSITIONS = np.array(
    [0, 1, 7, 2**16 - 1, 2**16, 10**5, 10**6, 10**7, 2**24 + 1, 123456789, 10**9]
    + [2**31 - 1, -1, -(2**16), -987654321, -(2**31)]
    + np.random.default_rng(0).integers(-(2**31), 2**31, 16).tolist(),
    np.int32,
)
EXACT_TOL = 1e-6  # the bound; the module's analysis gives 3e-7


def _exact(config: fp.RopeConfig) -> fp.RopeConfig:
    return dataclasses.replace(config, angle_precision="exact")


CASES = [
    (family, None)
    if family in ref.SAMPLED_FAMILIES
    else pytest.param(family, None, marks=pytest.mark.slow)
    for family in ref.FAMILIES
] + [
    ("dynamic_ntk", 10**6),
    ("longrope", ref.ORIGINAL),  # the short regime
    ("longrope", 4 * ref.ORIGINAL),
]


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize(("family", "seq_len"), CASES)
def test_cos_sin_within_1e6_of_the_truth_at_any_int32_position(family, seq_len, branch):
    config = _exact(ref.make_config(family, head_dim=64, original=ref.ORIGINAL))
    if config.depends_on_seq_len and seq_len is None:
        seq_len = 3 * ref.ORIGINAL
    inv_freq, attention = ref.frequencies(config, seq_len)
    cos, sin = run_branch(
        lambda p: fp.rope_cos_sin(p, config, seq_len=seq_len),
        jnp.asarray(POSITIONS),
        branch=branch,
    )
    true_sin, true_cos = true_sin_cos(POSITIONS, inv_freq)
    for got, truth in ((cos, true_cos), (sin, true_sin)):
        err = np.abs(np.asarray(got, np.float64) - attention * truth)
        assert err.max() <= EXACT_TOL * attention, (family, err.max())


@pytest.mark.parametrize(
    ("position", "float32_at_least"),
    [(10**5, 2e-4), (10**6, 2e-3), (10**7, 0.1), (2**31 - 1, 0.5)],
)
def test_error_figures_of_the_docs(position, float32_at_least):
    """docs/guide/exact_angles.md: float32 vs exact at Llama 3's frequencies."""
    config = fp.RopeConfig(head_dim=128, theta=500000.0)
    inv_freq, _ = ref.frequencies(config)
    positions = np.arange(position - 63, position + 1, dtype=np.int64)
    true_sin, true_cos = true_sin_cos(positions, inv_freq)
    errors = {}
    for precision in ("float32", "exact"):
        tables = fp.rope_cos_sin(
            jnp.asarray(positions, jnp.int32),
            dataclasses.replace(config, angle_precision=precision),
        )
        errors[precision] = max(
            np.abs(np.asarray(tables.cos, np.float64) - true_cos).max(),
            np.abs(np.asarray(tables.sin, np.float64) - true_sin).max(),
        )
    assert errors["float32"] >= float32_at_least, errors
    assert errors["exact"] <= 3e-7, errors


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_bfloat16_q_at_1e7_within_bfloat16_rounding(layout, branch):
    config = fp.RopeConfig(head_dim=64, theta=1e6, layout=layout)
    x = normal((2, 8, 3, 64), jnp.float32, seed=0)
    x = x.astype(jnp.bfloat16)
    positions = 10**7 + jnp.arange(8)
    inv_freq, attention = ref.frequencies(config)
    truth, _ = ref.rope(x, positions, inv_freq, attention, layout)
    allowed = 2.0**-8 * np.abs(truth) + 1e-6  # half an ulp of bfloat16, and float32
    exact = run_branch(
        lambda x, p: fp.apply_rope(x, p, _exact(config)), x, positions, branch=branch
    )
    assert exact.dtype == jnp.bfloat16
    assert np.all(np.abs(np.asarray(exact, np.float64) - truth) <= allowed)
    rounded = run_branch(
        lambda x, p: fp.apply_rope(x, p, config), x, positions, branch=branch
    )
    assert np.mean(np.abs(np.asarray(rounded, np.float64) - truth) > allowed) > 0.1


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize(
    ("dim", "spacing"),
    [(64, "paper"), pytest.param(33, "tensor2tensor", marks=pytest.mark.slow)],
)
def test_sinusoidal_within_1e6_of_the_truth(layout, dim, spacing, branch):
    i = np.arange(dim // 2, dtype=np.float64)
    if spacing == "paper":
        inv_freq = 1.0 / 10000.0 ** (2.0 * i / dim)
    else:
        inv_freq = np.exp(-np.log(10000.0) * i / (dim // 2 - 1))
    true_sin, true_cos = true_sin_cos(POSITIONS, inv_freq)
    pairs = 2 * (dim // 2)
    truth = np.zeros(POSITIONS.shape + (dim,))
    sin_at, cos_at = (
        (slice(0, pairs, 2), slice(1, pairs, 2))
        if layout == "interleaved"
        else (slice(0, dim // 2), slice(dim // 2, pairs))
    )
    truth[:, sin_at], truth[:, cos_at] = true_sin, true_cos
    got = run_branch(
        lambda p: fp.sinusoidal_encoding(
            p, dim, layout=layout, spacing=spacing, angle_precision="exact"
        ),
        jnp.asarray(POSITIONS),
        branch=branch,
    )
    assert np.abs(np.asarray(got, np.float64) - truth).max() <= EXACT_TOL
    table = fp.sinusoidal_table(
        10**5 + 1, dim, layout=layout, spacing=spacing, angle_precision="exact"
    )
    assert np.abs(np.asarray(table[-1], np.float64) - truth[5]).max() <= EXACT_TOL


def _shift_error(rotate, q, k, positions, offset) -> float:
    """``max |s(p + o) - s(p)| / (|q| |k|)`` of the per-head scores, float64."""

    def scores(p):
        qr = np.asarray(rotate(q, p), np.float64)
        kr = np.asarray(rotate(k, p), np.float64)
        return np.einsum("lnh,snh->nls", qr, kr)

    norms = np.einsum(
        "ln,sn->nls",
        np.linalg.norm(np.asarray(q, np.float64), axis=-1),
        np.linalg.norm(np.asarray(k, np.float64), axis=-1),
    )
    return float(np.max(np.abs(scores(positions + offset) - scores(positions)) / norms))


def _rotate(precision):
    config = fp.RopeConfig(head_dim=32, theta=500000.0, angle_precision=precision)
    return jax.jit(lambda x, p: fp.apply_rope(x, p, config))


ROTATE = {precision: _rotate(precision) for precision in ("float32", "exact")}


@given(
    offset=st.integers(10**8, 2**31 - 2**10),
    start=st.integers(0, 2**10),
    sign=st.sampled_from([1, -1]),
)
def test_scores_shift_invariant_at_offsets_of_1e8(offset, start, sign):
    q, k = normal((2, 16, 2, 32), seed=1)
    positions = jnp.arange(16) + start
    offset *= sign
    exact, rounded = ROTATE["exact"], ROTATE["float32"]
    assert_shift_invariance(exact, q, k, positions, [offset], rtol=1e-5)
    assert _shift_error(exact, q, k, positions, offset) <= 1e-5
    assert _shift_error(rounded, q, k, positions, offset) >= 0.05


def test_axial_and_mrope_use_exact_angles():
    config = fp.RopeConfig(head_dim=32, theta=10000.0, angle_precision="exact")
    coords = jnp.array([[2**31 - 1, 10**9], [-(10**8), 3]], jnp.int32)  # [L, 2]
    cos, sin = jax.jit(lambda c: fp.axial_rope_cos_sin(c, config))(coords)
    axis_freq, _ = ref.frequencies(fp.RopeConfig(head_dim=16, theta=10000.0))
    for axis in range(2):
        true_sin, true_cos = true_sin_cos(np.asarray(coords[:, axis]), axis_freq)
        block = slice(8 * axis, 8 * axis + 8)
        assert np.abs(np.asarray(cos[:, block]) - true_cos).max() <= EXACT_TOL
        assert np.abs(np.asarray(sin[:, block]) - true_sin).max() <= EXACT_TOL
    x = normal((5, 2, 32), seed=2)
    positions = 10**9 + jnp.arange(5)
    mrope = jax.jit(lambda x, p: fp.apply_mrope(x, p, config, mrope_section=(8, 4, 4)))
    np.testing.assert_array_equal(
        mrope(x, jnp.stack([positions] * 3)),
        jax.jit(lambda x, p: fp.apply_rope(x, p, config))(x, positions),
    )


@pytest.mark.parametrize("family", ref.SEQ_LEN_FAMILIES)
def test_exact_seq_len_families_need_an_int_seq_len(family):
    config = _exact(ref.make_config(family, head_dim=16, original=16))
    x, positions = jnp.ones((4, 1, 16)), jnp.arange(4)
    with pytest.raises(ValueError, match=r"got None; None means max\(positions\)"):
        fp.apply_rope(x, positions, config)
    with pytest.raises(ValueError, match=r"Python int.*got an array of shape"):
        jax.jit(lambda s: fp.apply_rope(x, positions, config, seq_len=s))(40)
    with pytest.raises(ValueError, match=r"Python int.*got an array of shape \(4,\)"):
        fp.apply_rope(x, positions, config, seq_len=jnp.arange(4) + 1)
    q, k = fp.apply_rope_qk(x, x, positions, config, seq_len=40)
    inv_freq, attention = ref.frequencies(config, 40)
    truth, _ = ref.rope(x, positions, inv_freq, attention, "half")
    np.testing.assert_allclose(q, truth, atol=1e-6)
    np.testing.assert_array_equal(q, k)


def test_positions_never_recompile_and_gradients_flow():
    config = fp.RopeConfig(head_dim=16, angle_precision="exact")
    x = normal((2, 6, 2, 16), seed=3)
    chex.clear_trace_counter()

    @jax.jit
    @chex.assert_max_traces(n=1)
    def run(x, positions):
        return fp.apply_rope(x, positions, config)

    for start in (0, 2**20, 2**31 - 6, -(2**31)):
        run(x, jnp.broadcast_to(start + jnp.arange(6), (2, 6)))
    positions = jnp.broadcast_to(2**30 + jnp.arange(6), (2, 6))
    grad = jax.grad(lambda x: jnp.sum(run(x, positions) ** 2))(x)
    np.testing.assert_allclose(grad, 2 * x, rtol=1e-5)  # a rotation keeps the norm


def test_an_exact_config_is_host_data():
    with jax.transfer_guard("disallow"):
        config = fp.RopeConfig(head_dim=8, angle_precision="exact")
    assert hash(config) == hash(dataclasses.replace(config))
    assert config != fp.RopeConfig(head_dim=8)


def test_x64_positions_must_hold_int32_values():
    config = fp.RopeConfig(head_dim=16, angle_precision="exact")
    inv_freq, _ = ref.frequencies(config)
    with enable_x64():
        positions = jnp.array([2**31 - 1, -(2**31), 10**9])
        assert positions.dtype == jnp.int64
        cos, sin = jax.jit(lambda p: fp.rope_cos_sin(p, config))(positions)
        with pytest.raises(ValueError, match=r"int32 range.*\[2147483648, "):
            fp.rope_cos_sin(jnp.array([2**31]), config)
    true_sin, true_cos = true_sin_cos(np.asarray(positions), inv_freq)
    assert np.abs(np.asarray(cos) - true_cos).max() <= EXACT_TOL
    assert np.abs(np.asarray(sin) - true_sin).max() <= EXACT_TOL


def test_x64_positions_below_int32_raise_like_those_above():
    """Exact angles read positions as int32: an x64 position below ``-2**31``
    would wrap as one above ``2**31 - 1`` does."""
    config = fp.RopeConfig(head_dim=16, angle_precision="exact")
    with enable_x64():
        for value in (-(2**31) - 1, -(2**40)):
            positions = jnp.array([value, 0])
            with pytest.raises(ValueError, match=rf"int32 range.*\[{value}, 0\]"):
                fp.rope_cos_sin(positions, config)
            with pytest.raises(ValueError, match=rf"int32 range.*\[{value}, 0\]"):
                fp.sinusoidal_encoding(positions, 8, angle_precision="exact")
