"""RoPE and its scaling families against float64 transcriptions of the papers
(``rope_reference``), under ``jax.jit``, in float32, bfloat16 and float16."""

import dataclasses
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rope_reference as ref
from helpers import normal
from hypothesis import given, settings
from hypothesis import strategies as st

import flax_posenc as fp

LAYOUTS = ("half", "interleaved")
DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)
POSITIONS = jnp.array([[0, 1, 2, 3, 4], [7, 100, 999, 2500, 4095]])
apply_rope = jax.jit(fp.apply_rope, static_argnames="config")


def angle_ulps(config):
    """Dynamic NTK multiplies a once-rounded inv_freq by a float32 ``exp(log)`` growth
    (measured: at most 14 x 2^-24 relative for factors up to 40 and seq_len up to 1e6);
    every other family rounds a float64 ``inv_freq`` once."""
    return 16 if isinstance(config.scaling, fp.DynamicNTKScaling) else 2


@pytest.mark.parametrize("family", ref.FAMILIES)
@pytest.mark.parametrize("rotary_dim", [16, 8])
def test_frequencies_match_float64_formula(family, rotary_dim):
    config = ref.make_config(family, rotary_dim=rotary_dim)
    frequencies = jax.jit(lambda s: fp.rope_frequencies(config, seq_len=s))
    for seq_len in (1, ref.ORIGINAL, ref.ORIGINAL + 1, 5 * ref.ORIGINAL):
        inv_freq, attention = frequencies(seq_len)
        want_inv_freq, want_attention = ref.frequencies(config, seq_len)
        assert inv_freq.dtype == jnp.float32
        chex.assert_shape(inv_freq, (rotary_dim // 2,))
        # One rounding to float32 (2^-24 relative), or 16 ulps for dynamic NTK.
        rtol = angle_ulps(config) * 2.0**-24
        np.testing.assert_allclose(inv_freq, want_inv_freq, rtol=rtol, atol=0)
        np.testing.assert_allclose(attention, want_attention, rtol=1e-7)


@pytest.mark.parametrize("family", ref.FAMILY_PARAMS)
@pytest.mark.parametrize("rotary_dim", [16, pytest.param(8, marks=pytest.mark.slow)])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_apply_rope_matches_float64_formula(family, rotary_dim, layout):
    """float32, bfloat16 and float16 inputs in one compiled call (one compile per
    config keeps the grid fast); also: pair norms scale by the attention factor only."""
    config = ref.make_config(family, rotary_dim=rotary_dim, layout=layout)
    xs = [normal((2, 5, 3, 16), dtype) for dtype in DTYPES]
    outs = jax.jit(lambda xs, p: [fp.apply_rope(x, p, config) for x in xs])(
        xs, POSITIONS
    )
    # seq_len=None: dynamic NTK and LongRoPE see max(positions) + 1 = 4096 > 2048.
    inv_freq, attention = ref.frequencies(config, seq_len=4096)
    if family not in (
        "yarn",
        "yarn_mscale",
        "yarn_untruncated",
        "longrope",
        "resonance_yarn",
    ):
        assert attention == 1.0  # so every pair keeps its norm
    a_idx, b_idx = ref.pair_indices(rotary_dim, layout)
    for x, got in zip(xs, outs, strict=True):
        assert got.dtype == x.dtype
        truth, angles = ref.rope(x, POSITIONS, inv_freq, attention, layout)
        ulps = angle_ulps(config)
        ref.assert_close_to_rope(
            got, x, truth, angles, attention, layout, angle_ulps=ulps
        )
        # Norms do not depend on the angles: half an ulp of the output, relative.
        got, xf = np.asarray(got, np.float64), np.asarray(x, np.float64)
        np.testing.assert_allclose(
            np.hypot(got[..., a_idx], got[..., b_idx]),
            attention * np.hypot(xf[..., a_idx], xf[..., b_idx]),
            rtol=float(jnp.finfo(x.dtype).eps) / 2 + 2.0**-21,
        )


@pytest.mark.parametrize("family", ref.FAMILIES)
def test_cos_sin_tables_match_float64_formula(family):
    config = ref.make_config(family)
    cos, sin = jax.jit(lambda p: fp.rope_cos_sin(p, config))(POSITIONS)
    inv_freq, attention = ref.frequencies(config, seq_len=4096)
    angles = np.asarray(POSITIONS, np.float64)[..., None] * inv_freq
    for got, want in ((cos, np.cos(angles)), (sin, np.sin(angles))):
        assert got.dtype == jnp.float32
        chex.assert_shape(got, (2, 5, 8))
        bound = attention * (angle_ulps(config) * 2.0**-24 * angles + 2.0**-22)
        np.testing.assert_array_less(np.abs(got - attention * want), bound)


def naive_bf16_rope(x, positions, inv_freq):
    """The classic bug: angles formed in the activation dtype (bf16)."""
    angles = (
        positions.astype(jnp.bfloat16)[:, None]
        * jnp.asarray(inv_freq, jnp.bfloat16)[None, :]
    )
    cos, sin = jnp.cos(angles)[:, None, :], jnp.sin(angles)[:, None, :]
    half = inv_freq.shape[0]
    a, b = x[..., :half], x[..., half:]
    return jnp.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def test_bf16_at_position_131071_is_within_bf16_rounding_of_the_truth():
    config = fp.RopeConfig(head_dim=128, theta=10000.0)
    x = normal((5, 4, 128), jnp.bfloat16)
    positions = jnp.array([131071, 131070, 100003, 65537, 1])
    got = apply_rope(x, positions, config=config)
    inv_freq, _ = ref.frequencies(config)
    truth, angles = ref.rope(x, positions, inv_freq, 1.0, "half")
    # Per pair: half a bf16 ulp (2^-8 r) + two float32 roundings of the angle
    # (2^-23 |angle| r, <= 0.016 r at 131071 rad) + float32 arithmetic.
    ref.assert_close_to_rope(got, x, truth, angles, 1.0, "half")
    naive = jax.jit(naive_bf16_rope)(x, positions, jnp.asarray(inv_freq, jnp.float32))
    with pytest.raises(AssertionError):
        ref.assert_close_to_rope(naive, x, truth, angles, 1.0, "half")
    # ... and not by a little: bf16 cannot even hold 131071 (it rounds to 131072).
    pair_norm = np.hypot(*np.split(np.asarray(x, np.float64), 2, axis=-1))
    naive_error = np.abs(np.asarray(naive, np.float64) - truth)[..., :64] / pair_norm
    assert np.max(naive_error[0]) > 0.5
    # Norms survive even at 131071 rad: within half a bf16 ulp.
    got_pairs = np.split(np.asarray(got, np.float64), 2, axis=-1)
    np.testing.assert_allclose(np.hypot(*got_pairs), pair_norm, rtol=2.0**-8 + 2**-21)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_rotate_applies_given_tables_to_explicit_pairs(layout, dtype):
    x = normal((2, 3, 2, 10), dtype)
    cos, sin = normal((3, 4), seed=1), normal((3, 4), seed=2)  # any tables, [L, R/2]
    got = jax.jit(functools.partial(fp.rope_rotate, layout=layout))(x, cos, sin)
    a_idx, b_idx = ref.pair_indices(8, layout)
    xf = np.asarray(x, np.float64)
    c, s = np.asarray(cos, np.float64)[:, None], np.asarray(sin, np.float64)[:, None]
    a, b = xf[..., a_idx], xf[..., b_idx]
    want = xf.copy()
    want[..., a_idx], want[..., b_idx] = a * c - b * s, b * c + a * s
    scale = float(jnp.finfo(dtype).eps) * np.max(np.abs(want))
    np.testing.assert_allclose(np.asarray(got, np.float64), want, atol=scale, rtol=0)
    np.testing.assert_array_equal(got[..., 8:], x[..., 8:])


def test_proportional_non_rotating_pairs_pass_through_exactly():
    config = ref.make_config("proportional", head_dim=16)  # 4 of 8 pairs rotate
    x = normal((5, 2, 16), jnp.bfloat16)
    got = apply_rope(x, jnp.arange(5) + 1000, config=config)
    np.testing.assert_array_equal(got[..., 4:8], x[..., 4:8])
    np.testing.assert_array_equal(got[..., 12:], x[..., 12:])
    assert not np.array_equal(got[..., 1:4], x[..., 1:4])


def test_yarn_bands_follow_rotations_over_the_original_context():
    """YaRN: frequencies making > beta_fast turns over the original context are
    kept, < beta_slow turns fully interpolated, and ramped in between."""
    s = fp.YarnScaling(factor=8.0, original_max_position_embeddings=4096)
    config = fp.RopeConfig(head_dim=128, theta=10000.0, scaling=s)
    inv_freq = np.asarray(fp.rope_frequencies(config).inv_freq, np.float64)
    base = ref.default_inv_freq(10000.0, 128)
    turns = 4096 * base / (2 * np.pi)
    fast, slow = turns > s.beta_fast, turns < s.beta_slow
    assert fast.sum() > 5 and slow.sum() > 5 and (~fast & ~slow).sum() > 5
    np.testing.assert_allclose(inv_freq[fast], base[fast], rtol=2**-23)
    np.testing.assert_allclose(inv_freq[slow], base[slow] / 8, rtol=2**-23)
    ratio = inv_freq / base  # falls monotonically from 1 to 1/8 (float32 rounding)
    assert np.all(np.diff(ratio) <= 2**-22)
    assert np.all((ratio >= (1 - 2**-23) / 8) & (ratio <= 1 + 2**-23))
    # 0.1 ln(s) + 1 (YaRN eq. 22's sqrt(1/t)).
    assert fp.rope_frequencies(config).attention_scaling == pytest.approx(
        0.1 * np.log(8.0) + 1
    )


def test_llama3_wavelength_bands():
    """Llama 3.1 (factor 8, low 1, high 4, 8192): wavelengths < 2048 kept, > 8192
    divided by 8, strictly in between for the rest."""
    s = fp.Llama3Scaling(
        factor=8.0,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_position_embeddings=8192,
    )
    config = fp.RopeConfig(head_dim=128, theta=500000.0, scaling=s)
    inv_freq = np.asarray(fp.rope_frequencies(config).inv_freq, np.float64)
    base = ref.default_inv_freq(500000.0, 128)
    wavelength = 2 * np.pi / base
    high, low = wavelength < 2048, wavelength > 8192
    mid = ~high & ~low
    assert high.sum() > 5 and low.sum() > 5 and mid.sum() > 3
    np.testing.assert_allclose(inv_freq[high], base[high], rtol=2**-23)
    np.testing.assert_allclose(inv_freq[low], base[low] / 8, rtol=2**-23)
    assert np.all(inv_freq[mid] < base[mid]) and np.all(inv_freq[mid] > base[mid] / 8)


def test_longrope_default_attention_factor_of_phi3_128k():
    """Phi-3-mini-128k: 131072 / 4096 = 32, so sqrt(1 + ln 32 / ln 4096) = sqrt(17/12)."""
    s = fp.LongRopeScaling(
        short_factor=(1.0,) * 48,
        long_factor=(2.0,) * 48,
        original_max_position_embeddings=4096,
        factor=32.0,
    )
    config = fp.RopeConfig(head_dim=96, scaling=s)
    assert fp.rope_frequencies(config).attention_scaling == pytest.approx(
        np.sqrt(17 / 12), rel=1e-12
    )


@pytest.mark.parametrize("family", ref.SEQ_LEN_FAMILIES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_seq_len_families_switch_at_original_length_without_retrace(family, layout):
    config = ref.make_config(family, head_dim=8, layout=layout)
    x = normal((4, 2, 8))
    chex.clear_trace_counter()

    @jax.jit
    @chex.assert_max_traces(n=1)
    def rotate(x, positions):
        return fp.apply_rope(x, positions, config)  # seq_len=None

    for top in (ref.ORIGINAL - 1, ref.ORIGINAL, ref.ORIGINAL + 1, 3 * ref.ORIGINAL):
        positions = jnp.arange(top - 4, top)  # max(positions) + 1 == top
        got = rotate(x, positions)
        inv_freq, attention = ref.frequencies(config, seq_len=top)
        truth, angles = ref.rope(x, positions, inv_freq, attention, layout)
        ulps = angle_ulps(config)
        ref.assert_close_to_rope(
            got, x, truth, angles, attention, layout, angle_ulps=ulps
        )
        if top == ref.ORIGINAL + 1:  # just past: no longer the pre-training regime
            inv_freq, attention = ref.frequencies(config, seq_len=ref.ORIGINAL)
            truth, angles = ref.rope(x, positions, inv_freq, attention, layout)
            with pytest.raises(AssertionError):
                ref.assert_close_to_rope(
                    got, x, truth, angles, attention, layout, angle_ulps=ulps
                )


# Each example compiles a new static config and shape: half the profile's budget.
@settings(max_examples=settings.default.max_examples // 2)
@given(
    family=st.sampled_from(ref.FAMILIES),
    layout=st.sampled_from(LAYOUTS),
    dtype=st.sampled_from([jnp.float32, jnp.bfloat16]),
    length=st.integers(1, 9),
    data=st.data(),
)
def test_decode_with_offset_equals_full_sequence(family, layout, dtype, length, data):
    start = data.draw(st.integers(0, 5000), label="start")
    begin = data.draw(st.integers(0, length - 1), label="begin")
    size = data.draw(st.integers(1, length - begin), label="size")
    config = ref.make_config(family, head_dim=8, rotary_dim=4, layout=layout)
    x = normal((2, length, 2, 8), dtype, seed=length)
    positions = start + jnp.arange(length)
    seq_len = start + length  # the decode steps see the full sequence's length

    # One compile per example; the step's inputs are separate arguments, so XLA
    # cannot rewrite one computation into the other.
    @jax.jit
    def full_and_step(x, positions, x_step, positions_step, seq_len):
        full = fp.apply_rope(x, positions, config, seq_len=seq_len)
        step = fp.apply_rope(x_step, positions_step, config, seq_len=seq_len)
        return full, step

    window = slice(begin, begin + size)
    full, step = full_and_step(x, positions, x[:, window], positions[window], seq_len)
    full = full[:, window]
    scale = float(jnp.finfo(dtype).eps) * float(jnp.max(jnp.abs(x.astype(jnp.float32))))
    np.testing.assert_allclose(
        np.asarray(step, np.float64),
        np.asarray(full, np.float64),
        atol=scale,
        rtol=0,
    )


@pytest.mark.parametrize("rotary_dim", [8, 6])
@pytest.mark.parametrize("source", LAYOUTS)
def test_permuted_weights_give_permuted_rope_and_same_scores(rotary_dim, source):
    target = "half" if source == "interleaved" else "interleaved"
    d_model, heads, head_dim = 12, 2, 8
    x = normal((2, 5, d_model))
    w_q, w_k = (
        normal((d_model, heads, head_dim), seed=1),
        normal((d_model, heads, 8), seed=2),
    )
    positions = jnp.arange(5) + 300
    permute = jax.jit(
        functools.partial(
            fp.rope_permute_layout, rotary_dim=rotary_dim, source=source, target=target
        )
    )

    def project_rotate(w, layout):
        config = fp.RopeConfig(head_dim=head_dim, rotary_dim=rotary_dim, layout=layout)
        h = jnp.einsum("bld,dnh->blnh", x, w, precision="highest")
        return apply_rope(h, positions, config=config)

    q_source, k_source = project_rotate(w_q, source), project_rotate(w_k, source)
    q_target = project_rotate(permute(w_q), target)
    k_target = project_rotate(permute(w_k), target)
    np.testing.assert_allclose(q_target, permute(q_source), rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(k_target, permute(k_source), rtol=1e-6, atol=1e-5)
    scores = functools.partial(jnp.einsum, "blnh,bsnh->bnls", precision="highest")
    np.testing.assert_allclose(
        scores(q_target, k_target), scores(q_source, k_source), rtol=1e-5, atol=1e-4
    )


def test_permute_layout_order():
    w = jnp.arange(10) * 1.0
    to_half = functools.partial(
        fp.rope_permute_layout, rotary_dim=8, source="interleaved", target="half"
    )
    np.testing.assert_array_equal(to_half(w), [0, 2, 4, 6, 1, 3, 5, 7, 8, 9])
    back = fp.rope_permute_layout(
        to_half(w), rotary_dim=8, source="half", target="interleaved"
    )
    np.testing.assert_array_equal(back, w)
    same = fp.rope_permute_layout(w, rotary_dim=8, source="half", target="half")
    np.testing.assert_array_equal(same, w)
    w2 = jnp.arange(20.0).reshape(10, 2)
    np.testing.assert_array_equal(to_half(w2, axis=0), w2[np.asarray(to_half(w), int)])


X = jnp.zeros((2, 5, 3, 8))
CONFIG = fp.RopeConfig(head_dim=8)


def long_rope(short, long):
    return fp.LongRopeScaling(
        short_factor=(1.0,) * short,
        long_factor=(1.0,) * long,
        original_max_position_embeddings=16,
    )


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (
            lambda: fp.RopeConfig(head_dim=8, rotary_dim=5),
            ValueError,
            r"`rotary_dim` must be even and <= head_dim \(8\), got 5",
        ),
        (
            lambda: fp.RopeConfig(head_dim=8, rotary_dim=10),
            ValueError,
            r"`rotary_dim` must be even and <= head_dim \(8\), got 10",
        ),
        (
            lambda: fp.RopeConfig(head_dim=0),
            ValueError,
            "`head_dim` must be a positive",
        ),
        (lambda: fp.RopeConfig(head_dim=8, theta=-1.0), ValueError, "`theta`"),
        (
            lambda: fp.RopeConfig(head_dim=8, layout="neox"),
            ValueError,
            "`layout` must be one of 'half', 'interleaved', got 'neox'",
        ),
        (
            lambda: fp.RopeConfig(head_dim=8, angle_precision="float64"),
            ValueError,
            "`angle_precision` must be one of 'float32', 'exact', got 'float64'",
        ),
        (
            lambda: fp.apply_rope(
                X,
                jnp.arange(5),
                fp.RopeConfig(
                    head_dim=8,
                    scaling=fp.DynamicNTKScaling(2.0, 16),
                    angle_precision="exact",
                ),
            ),
            ValueError,
            "`seq_len` must be a Python int for DynamicNTKScaling with "
            "angle_precision='exact'",
        ),
        (
            lambda: fp.RopeConfig(head_dim=8, scaling={"rope_type": "linear"}),
            TypeError,
            "`scaling` must be None or one of LinearScaling",
        ),
        (
            lambda: fp.RopeConfig(head_dim=8, scaling=long_rope(3, 4)),
            ValueError,
            r"`LongRopeScaling.short_factor` must have rotary_dim // 2 = 4 entries, got 3",
        ),
        (
            lambda: fp.RopeConfig(head_dim=8, scaling=long_rope(4, 5)),
            ValueError,
            r"`LongRopeScaling.long_factor` must have rotary_dim // 2 = 4 entries, got 5",
        ),
        (
            lambda: fp.RopeConfig(head_dim=8, rotary_dim=2, scaling=fp.NTKScaling(2.0)),
            ValueError,
            "rotary_dim > 2",
        ),
        (
            lambda: fp.RopeConfig(head_dim=7),
            ValueError,
            r"`head_dim` must be even when `rotary_dim` is None .* got 7. Hint: pass "
            r"an even `rotary_dim` <= 7",
        ),
        (  # an odd head from hidden_size / num_attention_heads
            lambda: fp.read_hf_rope(
                {
                    "model_type": "llama",
                    "hidden_size": 21,
                    "num_attention_heads": 3,
                    "max_position_embeddings": 64,
                }
            ),
            ValueError,
            r"`head_dim` must be even when `rotary_dim` is None .* got 7",
        ),
        (lambda: fp.LinearScaling(factor=0.0), ValueError, "`LinearScaling.factor`"),
        (lambda: fp.LinearScaling(factor="2"), TypeError, "`LinearScaling.factor`"),
        (
            lambda: fp.Llama3Scaling(8.0, 4.0, 1.0, 8192),
            ValueError,
            "`Llama3Scaling.high_freq_factor` must be >= low_freq_factor",
        ),
        (
            lambda: fp.ProportionalScaling(partial_rotary_factor=1.5),
            ValueError,
            "`ProportionalScaling.partial_rotary_factor`",
        ),
        (
            lambda: fp.ResonanceScaling(fp.DynamicNTKScaling(2.0, 16)),
            TypeError,
            r"`ResonanceScaling.scaling` must be a static family .* got "
            r"DynamicNTKScaling\(.*no fixed wavelengths",
        ),
        (
            lambda: fp.ResonanceScaling(fp.RopeConfig(head_dim=8)),
            TypeError,
            r"`ResonanceScaling.scaling` must be a static family .* got RopeConfig",
        ),
        (  # 1 / 0.05 = 20 >= 4 pi: a wavelength of 0.31 rounds to 0
            lambda: fp.RopeConfig(
                head_dim=8, scaling=fp.ResonanceScaling(fp.LinearScaling(0.05))
            ),
            ValueError,
            r"largest frequency 20.0 has a wavelength of at most 1/2, which rounds "
            r"to 0; give a family whose frequencies are below 4 pi",
        ),
        (  # the inner family's own check still runs
            lambda: fp.RopeConfig(
                head_dim=8,
                rotary_dim=2,
                scaling=fp.ResonanceScaling(fp.NTKScaling(2.0)),
            ),
            ValueError,
            r"NTKScaling needs rotary_dim > 2",
        ),
        (
            lambda: fp.apply_rope(jnp.zeros((2, 5, 3, 6)), jnp.arange(5), CONFIG),
            ValueError,
            r"H = config.head_dim \(8\), got shape \(2, 5, 3, 6\)",
        ),
        (
            lambda: fp.apply_rope(X, jnp.arange(5.0), CONFIG),
            TypeError,
            "`positions` must be an integer array, got dtype float32",
        ),
        (
            lambda: fp.apply_rope(X, [0, 1.5, 2, 3, 4], CONFIG),
            TypeError,
            "`positions` must be an integer array",
        ),
        (
            lambda: fp.apply_rope(X, jnp.arange(6), CONFIG),
            ValueError,
            r"`positions` must be \[..., L\] with L = 5.*got shape \(6,\)",
        ),
        (
            lambda: fp.apply_rope(X, jnp.zeros((3, 5), int), CONFIG),
            ValueError,
            r"leading axes that broadcast to x.shape\[:-2\] = \(2, 5\); got shape \(3, 5\)",
        ),
        (lambda: fp.rope_cos_sin(jnp.arange(4.0), CONFIG), TypeError, "`positions`"),
        (
            lambda: fp.rope_rotate(
                X, jnp.ones((5, 4)), jnp.ones((5, 4)), layout="neox"
            ),
            ValueError,
            "`layout` must be one of",
        ),
        (
            lambda: fp.rope_rotate(X, jnp.ones((5, 4)), jnp.ones((5, 3))),
            ValueError,
            "`cos` and `sin` must have one shape",
        ),
        (
            lambda: fp.rope_rotate(X, jnp.ones((5, 5)), jnp.ones((5, 5))),
            ValueError,
            r"R <= head_dim \(8\)",
        ),
        (
            lambda: fp.rope_rotate(X, jnp.ones((4, 4)), jnp.ones((4, 4))),
            ValueError,
            r"`cos` and `sin` must be \[..., L, R/2\] with L = x.shape\[-3\] \(5\)",
        ),
        (
            lambda: fp.rope_permute_layout(
                X, rotary_dim=8, source="neox", target="half"
            ),
            ValueError,
            "`source` must be one of",
        ),
        (
            lambda: fp.rope_permute_layout(
                X, rotary_dim=7, source="half", target="half"
            ),
            ValueError,
            r"`rotary_dim` must be even and <= the head size \(8\), got 7",
        ),
    ],
)
def test_bad_inputs_raise_naming_the_argument(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_dynamic_ntk_rejects_rotary_dim_2():
    scaling = fp.DynamicNTKScaling(factor=2.0, original_max_position_embeddings=16)
    with pytest.raises(ValueError, match="rotary_dim > 2"):
        fp.RopeConfig(head_dim=8, rotary_dim=2, scaling=scaling)


def test_empty_positions_with_seq_len_dependent_scaling():
    config = fp.RopeConfig(
        head_dim=8,
        scaling=fp.DynamicNTKScaling(factor=2.0, original_max_position_embeddings=4),
    )
    x = jnp.ones((2, 0, 1, 8))
    assert apply_rope(x, jnp.zeros((2, 0), jnp.int32), config).shape == (2, 0, 1, 8)


def test_yarn_rejects_theta_of_one():
    scaling = fp.YarnScaling(factor=2.0, original_max_position_embeddings=16)
    with pytest.raises(ValueError, match="`theta` must be > 1"):
        fp.RopeConfig(head_dim=8, theta=1.0, scaling=scaling)


def test_permute_layout_rejects_a_bad_axis():
    with pytest.raises(ValueError, match="`axis` must index w"):
        fp.rope_permute_layout(
            jnp.zeros((4, 8)), rotary_dim=8, source="half", target="interleaved", axis=2
        )


def test_resonance_rounds_each_wavelength_to_the_nearest_integer():
    """Resonance YaRN: integer wavelengths (the nearest to YaRN's), YaRN's attention
    factor kept, and each pair back at its start one wavelength on. Kills rounding
    the frequency instead of the wavelength, and dropping the inner factor."""
    yarn = fp.YarnScaling(factor=8.0, original_max_position_embeddings=2048)
    config = fp.RopeConfig(head_dim=64, scaling=fp.ResonanceScaling(yarn))
    waves = fp.rope_wavelengths(config, seq_len=2048).wavelength
    np.testing.assert_allclose(waves, np.round(waves), rtol=2.0**-23, atol=0)
    inner = fp.rope_wavelengths(dataclasses.replace(config, scaling=yarn), seq_len=2048)
    np.testing.assert_array_less(np.abs(waves - inner.wavelength), 0.5 + 1e-3)
    assert np.ptp(waves - inner.wavelength) > 0.5  # rounded both ways
    assert fp.rope_frequencies(config).attention_scaling == pytest.approx(
        yarn.effective_attention_factor()
    )
    period = int(np.round(waves[1]))  # one whole turn of pair 1 (8 positions)
    cos, sin = fp.rope_cos_sin(jnp.array([0, period]), config)
    np.testing.assert_allclose(cos[1, 1], cos[0, 1], atol=1e-5)
    np.testing.assert_allclose(sin[1, 1], sin[0, 1], atol=1e-5)
