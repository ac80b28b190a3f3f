"""flax_posenc.testing assertions pass for the right thing and fail for the wrong one."""

import functools
import inspect

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
from flax_posenc import testing

POSITIONS = np.arange(0, 200, 3)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("spacing", ["paper", "tensor2tensor"])
def test_sinusoidal_is_offset_linear(layout, spacing):
    encode = functools.partial(
        fp.sinusoidal_encoding, dim=16, layout=layout, spacing=spacing
    )
    testing.assert_relative_offset_linearity(encode, POSITIONS, offsets=[1, 5, 37])


def test_random_learned_table_is_not_offset_linear():
    table = normal((512, 16), seed=0)

    def encode(p):
        return fp.learned_embedding_lookup(table, p)

    with pytest.raises(AssertionError, match=r"offset k=1: residual"):
        testing.assert_relative_offset_linearity(encode, POSITIONS, offsets=[1])


def test_offset_linearity_needs_more_positions_than_rank():
    encode = functools.partial(fp.sinusoidal_encoding, dim=16)
    with pytest.raises(ValueError, match="must outnumber the encoding's rank"):
        testing.assert_relative_offset_linearity(encode, np.arange(8), offsets=[1])


@pytest.mark.parametrize("offset", [1, 100, 10**5, 10**7, 2**30, 2**31 - 1 - 199])
def test_offset_linearity_can_fail_at_every_offset_it_accepts(offset):
    """Offsets are accepted up to int32; at each, an exact-angle sinusoidal encoding
    passes and a random table (indexed mod its size) fails."""
    exact = functools.partial(fp.sinusoidal_encoding, dim=16, angle_precision="exact")
    testing.assert_relative_offset_linearity(exact, POSITIONS, offsets=[offset])
    table = normal((509, 16), seed=0)
    with pytest.raises(AssertionError, match=f"offset k={offset}: residual"):
        testing.assert_relative_offset_linearity(
            lambda p: table[p % 509], POSITIONS, offsets=[offset]
        )


def test_module_shapes_assertion_both_ways():
    dims = chex.Dimensions(B=2, L=5, D=8)
    x = jnp.zeros((2, 5, 8))
    testing.assert_module_shapes(x, x, dims=dims, spec="BLD")
    for wrong in (jnp.zeros((2, 5, 9)), jnp.zeros((2, 5))):
        with pytest.raises(AssertionError):
            testing.assert_module_shapes(x, wrong, dims=dims, spec="BLD")


def test_encoding_shape_assertion_both_ways():
    positions = jnp.arange(6).reshape(2, 3)
    pe = fp.sinusoidal_encoding(positions, 4)
    testing.assert_encoding_shape(pe, positions, 4, dtype=jnp.float32)
    with pytest.raises(AssertionError):
        testing.assert_encoding_shape(pe, positions, 5)
    with pytest.raises(AssertionError):
        testing.assert_encoding_shape(pe.at[0, 0, 0].set(jnp.nan), positions, 4)
    with pytest.raises(AssertionError):
        testing.assert_encoding_shape(pe, positions, 4, dtype=jnp.bfloat16)


Q, K = normal((2, 6, 2, 8)), normal((2, 6, 2, 8), seed=1)
SHIFT_POSITIONS = np.array([[0, 3, 4, 9, 10, 30], [5, 1, 2, 200, 7, 8]])
SHIFT_OFFSETS = [1, 17, 1000]


def rope_fn(config, seq_len=None):
    return jax.jit(lambda x, p: fp.apply_rope(x, p, config, seq_len=seq_len))


@pytest.mark.parametrize("family", ref.FAMILY_PARAMS)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_is_shift_invariant(family, layout):
    config = ref.make_config(family, head_dim=8, layout=layout)
    # Dynamic NTK and LongRoPE must see one seq_len for every shift (see below).
    seq_len = 4096 if family in ref.SEQ_LEN_FAMILIES else None
    rotate = rope_fn(config, seq_len)
    testing.assert_shift_invariance(rotate, Q, K, SHIFT_POSITIONS, SHIFT_OFFSETS)
    bf16 = functools.partial(normal, dtype=jnp.bfloat16)
    q, k = bf16((6, 2, 8)), bf16((6, 2, 8), seed=1)
    testing.assert_shift_invariance(rotate, q, k, SHIFT_POSITIONS[0], SHIFT_OFFSETS)


@pytest.mark.parametrize("family", ref.SEQ_LEN_FAMILIES)
def test_seq_len_families_are_shift_invariant_only_within_one_regime(family):
    """With seq_len = max(positions) + 1 the frequencies follow the positions: fine
    below the original length (pre-training regime), not across it."""
    rotate = rope_fn(ref.make_config(family, head_dim=8))
    below = ref.ORIGINAL - 1 - int(SHIFT_POSITIONS.max())
    testing.assert_shift_invariance(rotate, Q, K, SHIFT_POSITIONS, [1, below])
    with pytest.raises(AssertionError, match=f"offset={ref.ORIGINAL}.* fixed seq_len"):
        testing.assert_shift_invariance(rotate, Q, K, SHIFT_POSITIONS, [ref.ORIGINAL])


@pytest.mark.parametrize("stddev", [1.0, 0.02])  # 0.02: BERT's initial table
def test_adding_a_learned_embedding_is_not_shift_invariant(stddev):
    table = stddev * normal((256, 8), seed=2)

    def add_learned(x, positions):
        return x + table[positions][..., None, :]

    with pytest.raises(AssertionError, match=r"offset=1 changes the scores by up to"):
        testing.assert_shift_invariance(add_learned, Q, K, SHIFT_POSITIONS, [1])


def test_a_rotation_by_non_relative_angles_is_not_shift_invariant():
    """Norm-preserving, but the angle p^2 theta_i does not split into m - n."""
    inv_freq = fp.rope_frequencies(fp.RopeConfig(head_dim=8)).inv_freq

    def rotate_quadratic(x, positions):
        angles = (positions.astype(jnp.float32) ** 2)[..., None] * inv_freq[None, None]
        return fp.rope_rotate(x, jnp.cos(angles), jnp.sin(angles))

    with pytest.raises(AssertionError, match=r"offset=3 changes"):
        testing.assert_shift_invariance(rotate_quadratic, Q, K, SHIFT_POSITIONS, [3])


# Each example compiles a new static config and shape: half the profile's budget.
@settings(max_examples=settings.default.max_examples // 2)
@given(
    family=st.sampled_from(ref.FAMILIES),
    layout=st.sampled_from(["half", "interleaved"]),
    dtype=st.sampled_from([jnp.float32, jnp.bfloat16]),
    batch=st.sampled_from([(), (2,)]),
    length=st.integers(1, 6),
    heads=st.integers(1, 3),
    group=st.sampled_from([1, 2, 4]),  # q heads per k head (grouped-query attention)
    head_dim=st.sampled_from([4, 8, 16]),
    partial=st.booleans(),
    data=st.data(),
)
def test_rope_shift_invariance_property(
    family, layout, dtype, batch, length, heads, group, head_dim, partial, data
):
    rotary_dim = head_dim // 2 if partial and head_dim > 4 else head_dim
    config = ref.make_config(
        family, head_dim=head_dim, rotary_dim=rotary_dim, layout=layout
    )
    positions = np.asarray(
        data.draw(
            st.lists(st.integers(0, 3000), min_size=length, max_size=length),
            label="positions",
        )
    )
    positions = np.broadcast_to(positions, (*batch, length))
    offsets = data.draw(
        st.lists(st.integers(-int(positions.min()), 3000), min_size=1, max_size=3),
        label="offsets",
    )
    q = normal((*batch, length, heads * group, head_dim), dtype, seed=length)
    k = normal((*batch, length, heads, head_dim), dtype, seed=heads + 7)
    seq_len = 8192 if family in ref.SEQ_LEN_FAMILIES else None
    testing.assert_shift_invariance(rope_fn(config, seq_len), q, k, positions, offsets)


# Grouped-query attention: 8 q heads share 2 k heads, 4 q heads per k head (Llama).
Q_GQA = normal((2, 6, 8, 8), seed=3)
K_GQA = normal((2, 6, 2, 8), seed=4)


@pytest.mark.parametrize("family", ["plain", "yarn", "llama3"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize(
    "dtype", [jnp.float32, pytest.param(jnp.bfloat16, marks=pytest.mark.slow)]
)
def test_rope_is_shift_invariant_with_grouped_query_attention(family, layout, dtype):
    rotate = rope_fn(ref.make_config(family, head_dim=8, layout=layout))
    q, k = Q_GQA.astype(dtype), K_GQA.astype(dtype)
    testing.assert_shift_invariance(rotate, q, k, SHIFT_POSITIONS, SHIFT_OFFSETS)


def test_absolute_encoding_is_not_shift_invariant_with_grouped_query_attention():
    table = normal((256, 8), seed=2)

    def add_learned(x, positions):
        return x + table[positions][..., None, :]

    with pytest.raises(AssertionError, match=r"offset=1 changes the scores"):
        testing.assert_shift_invariance(add_learned, Q_GQA, K_GQA, SHIFT_POSITIONS, [1])


def test_grouped_scores_pair_each_q_head_with_its_k_head():
    """Scores by loops in float64: q head n meets k head n // (N / K), Llama's
    repeat_kv (not n % K, which a tile instead of a repeat would give)."""
    q, k = np.asarray(Q_GQA, np.float64), np.asarray(K_GQA, np.float64)
    group = q.shape[-2] // k.shape[-2]
    want = np.zeros((2, 8, 6, 6))
    for b, n, query, key in np.ndindex(*want.shape):
        want[b, n, query, key] = q[b, query, n] @ k[b, key, n // group]
    np.testing.assert_allclose(testing._attention_scores(q, k), want, rtol=1e-12)


@pytest.mark.parametrize("duplicate", ["concat", "repeat"])
def test_a_rope_with_mismatched_layout_is_not_shift_invariant(duplicate):
    """rotate_half (pairs (j, j + H/2)) needs cos/sin as [c | c]; the interleaved
    duplication [c0, c0, c1, c1, ...] (a classic porting bug) is no rotation."""
    config = fp.RopeConfig(head_dim=8)

    def rotate(x, positions):
        cos, sin = fp.rope_cos_sin(positions, config)  # [..., L, H/2]
        if duplicate == "concat":
            cos, sin = (jnp.concatenate([t, t], axis=-1) for t in (cos, sin))
        else:
            cos, sin = (jnp.repeat(t, 2, axis=-1) for t in (cos, sin))
        x1, x2 = jnp.split(x, 2, axis=-1)
        rotated = jnp.concatenate([-x2, x1], axis=-1)
        return x * cos[..., None, :] + rotated * sin[..., None, :]

    check = functools.partial(
        testing.assert_shift_invariance, rotate, Q_GQA, K_GQA, SHIFT_POSITIONS, [1, 17]
    )
    if duplicate == "concat":
        check()
    else:
        with pytest.raises(AssertionError, match=r"offset=1 changes"):
            check()


@pytest.mark.parametrize("family", ref.FAMILY_PARAMS)
def test_tolerance_is_sized_by_the_shifted_positions(family):
    """A correct RoPE passes at offset 10**5 from small positions (a tolerance sized
    by the unshifted positions, ~1e-4, would fail it: float32 angles at 1e5 are off
    by up to 1e5 * 2^-23 ~ 0.012 rad), and back from there to small ones."""
    seq_len = 4096 if family in ref.SEQ_LEN_FAMILIES else None
    rotate = rope_fn(ref.make_config(family, head_dim=8), seq_len)
    testing.assert_shift_invariance(rotate, Q, K, SHIFT_POSITIONS, [10**5])
    far = SHIFT_POSITIONS + 10**5
    testing.assert_shift_invariance(rotate, Q, K, far, [-(10**5), 1])


# The largest position whose float32 default tolerance stays within LARGEST_RTOL.
FLOAT32_LIMIT = int((testing.LARGEST_RTOL - 4 * 2.0**-23) * 2**21)
INT32_MAX = 2**31 - 1
SHIFT_MAX = int(SHIFT_POSITIONS.max())
ACCEPTED_OFFSETS = {
    "float32": [1, 17, 1000, 10**5, FLOAT32_LIMIT - SHIFT_MAX],
    "exact": [1, 1000, 10**6, 10**7, 2**30, INT32_MAX - SHIFT_MAX],
}


def rope_other_theta_for_k(angle_precision):
    """q rotated at theta 1e4, k at 1.5e4: norms kept, scores not relative. (The
    helper passes `q` and `k` through as given, so `x is K` tells them apart.)"""
    q_config, k_config = (
        fp.RopeConfig(head_dim=8, theta=theta, angle_precision=angle_precision)
        for theta in (1e4, 1.5e4)
    )

    def rotate(x, positions):
        config = k_config if x is K else q_config
        return fp.apply_rope(x, positions, config)

    return rotate


def add_sinusoidal(angle_precision):
    def rotate(x, positions):
        pe = fp.sinusoidal_encoding(positions, 8, angle_precision=angle_precision)
        return x + pe[..., None, :]

    return rotate


def rope(angle_precision):
    config = fp.RopeConfig(head_dim=8, angle_precision=angle_precision)
    return lambda x, p: fp.apply_rope(x, p, config)


@pytest.mark.parametrize(
    "angle_precision, offset",
    [(a, o) for a, offsets in ACCEPTED_OFFSETS.items() for o in offsets],
)
def test_shift_invariance_can_fail_at_every_offset_it_accepts(angle_precision, offset):
    """At every offset the default tolerance accepts (up to its limit), a correct
    RoPE passes and two planted wrong encodings fail: k rotated at another theta,
    and an absolute encoding added to q and k."""
    testing.assert_shift_invariance(
        rope(angle_precision), Q, K, SHIFT_POSITIONS, [offset],
        angle_precision=angle_precision,
    )  # fmt: skip
    for planted in (rope_other_theta_for_k, add_sinusoidal):
        with pytest.raises(AssertionError, match=f"offset={offset} changes"):
            testing.assert_shift_invariance(
                planted(angle_precision), Q, K, SHIFT_POSITIONS, [offset],
                angle_precision=angle_precision,
            )  # fmt: skip


def test_failure_shows_the_documented_tolerance():
    """At offset 1000 from positions up to 200 (float32 outputs) the default is the
    documented 4 eps + 2^-21 P with P = 1200, and the message shows it."""
    table = normal((2048, 8), seed=2)

    def add_learned(x, positions):
        return x + table[positions][..., None, :]

    documented = 4 * 2.0**-23 + 2.0**-21 * 1200
    with pytest.raises(AssertionError, match=rf"rtol = {documented:.3g} \(sized"):
        testing.assert_shift_invariance(add_learned, Q, K, SHIFT_POSITIONS, [1000])


def test_a_tolerance_that_cannot_fail_raises():
    """Past FLOAT32_LIMIT the float32 default exceeds LARGEST_RTOL: a ValueError
    names exact angles; an explicit rtol above LARGEST_RTOL raises too."""
    just_past = FLOAT32_LIMIT + 1 - SHIFT_MAX
    with pytest.raises(ValueError, match=r"above LARGEST_RTOL .* angle_precision="):
        testing.assert_shift_invariance(
            rope("float32"), Q, K, SHIFT_POSITIONS, [1, just_past]
        )
    with pytest.raises(ValueError, match=r"`rtol` must be at most LARGEST_RTOL"):
        testing.assert_shift_invariance(
            rope("float32"), Q, K, SHIFT_POSITIONS, [1], rtol=0.2
        )


def test_exact_default_tolerance_is_tight():
    """With exact angles the default is 4 eps + 2^-19 at any offset (2.4e-6 in
    float32), so k rotated at a theta only 1e-5 larger fails at 2**30."""
    q_config = fp.RopeConfig(head_dim=8, angle_precision="exact")
    k_config = fp.RopeConfig(
        head_dim=8, theta=1e4 * (1 + 1e-5), angle_precision="exact"
    )

    def rotate(x, positions):
        return fp.apply_rope(x, positions, k_config if x is K else q_config)

    with pytest.raises(AssertionError, match=r"rtol = 2.38e-06"):
        testing.assert_shift_invariance(
            rotate, Q, K, SHIFT_POSITIONS, [2**30], angle_precision="exact"
        )


def test_a_large_offset_does_not_loosen_the_small_ones():
    """An angle error of 0.01 rad on odd positions keeps even offsets invariant and
    breaks odd ones. Beside offset 2 * 10**5 (tolerance ~0.095) offset 1 must still be
    held to its own positions (< 202: ~1e-4), where a tolerance sized by the largest
    offset of the call would let it pass."""
    inv_freq = fp.rope_frequencies(fp.RopeConfig(head_dim=8)).inv_freq

    def rotate_parity(x, positions):
        parity = (positions % 2).astype(jnp.float32)[..., None]
        angles = positions.astype(jnp.float32)[..., None] * inv_freq[None, None]
        angles = angles + 0.01 * parity
        return fp.rope_rotate(x, jnp.cos(angles), jnp.sin(angles))

    testing.assert_shift_invariance(rotate_parity, Q, K, SHIFT_POSITIONS, [2 * 10**5])
    with pytest.raises(AssertionError, match=r"offset=1 .* position, 201, and"):
        testing.assert_shift_invariance(
            rotate_parity, Q, K, SHIFT_POSITIONS, [2 * 10**5, 1]
        )


@pytest.mark.parametrize("dim", [8, 16, 64, pytest.param(512, marks=pytest.mark.slow)])
@pytest.mark.parametrize("spacing", ["paper", "tensor2tensor"])
def test_offset_linearity_defaults_hold_for_sinusoidal(dim, spacing):
    """Defaults: positions 0..2D-1, offsets (1, 2, 7, 100), rtol 1e-4."""
    encode = functools.partial(fp.sinusoidal_encoding, dim=dim, spacing=spacing)
    testing.assert_relative_offset_linearity(encode)


def test_offset_linearity_defaults_catch_a_random_table():
    table = normal((256, 16), seed=0)

    def encode(p):
        return fp.learned_embedding_lookup(table, p)

    with pytest.raises(AssertionError, match=r"offset k=1: residual"):
        testing.assert_relative_offset_linearity(encode)
    assert testing.DEFAULT_OFFSETS == (1, 2, 7, 100)


FIRE = fp.FireParams(
    jnp.array(0.1), jnp.array(1.0), jnp.linspace(-1, 1, 8), jnp.zeros(8),
    normal((8, 2), seed=3), jnp.zeros(2),
)  # fmt: skip
KERPLE_RAW = normal((2,), seed=4)
INVARIANT_BIASES = {
    "alibi": fp.AlibiBias(5),
    "t5": fp.RelativeBias(normal((32, 2), seed=5), bidirectional=False),
    "kerple_log": fp.KerpleBias(KERPLE_RAW, KERPLE_RAW),
    "kerple_power": fp.KerpleBias(KERPLE_RAW, KERPLE_RAW, kernel="power"),
    "fire_below_threshold": fp.FireBias(FIRE, init_threshold=2.0**25),
}


@pytest.mark.parametrize("name", list(INVARIANT_BIASES))
def test_relative_biases_are_shift_invariant_at_any_offset(name):
    """No refusal at 10**7 (a bias has no angles), and the default tolerance holds
    every one of them: each is formed from the integer distance."""
    testing.assert_bias_shift_invariance(
        INVARIANT_BIASES[name], np.arange(6), [1, 977, 10**7],
        k_positions=np.array([0, 2, 5, 11]),
    )  # fmt: skip


def test_fire_past_its_threshold_fails_the_bias_check():
    """FIRE's normaliser follows the query past ``init_threshold`` (here the default
    512): at offset 1e5 the bias moves by logits, far above ``4 eps max|b|``."""
    with pytest.raises(
        AssertionError,
        match=r"offset=100000 changes it by up to .* logits .* > atol = .*\(4 eps",
    ):
        testing.assert_bias_shift_invariance(
            fp.FireBias(FIRE), np.arange(6), [1, 10**5]
        )


@pytest.mark.parametrize("absolute", [1e-3, 1e-5])
def test_a_bias_with_an_absolute_part_fails(absolute):
    """ALiBi plus ``absolute * q_pos``: a change of 1e-5 logits per unit offset is
    already above the default tolerance at offset 1 (values up to 5 logits)."""
    alibi = fp.AlibiBias(2)

    def plus_absolute(q_positions, k_positions):
        return alibi(q_positions, k_positions) + absolute * q_positions[None, :, None]

    with pytest.raises(AssertionError, match=r"offset=1 changes it"):
        testing.assert_bias_shift_invariance(plus_absolute, np.arange(6), [1])
    testing.assert_bias_shift_invariance(  # an explicit atol in logits
        plus_absolute, np.arange(6), [1], atol=2 * absolute
    )


def test_an_exact_tolerance_on_float32_angles_says_so():
    """A float32-angle RoPE checked with angle_precision="exact" fails far out; the
    message says ``rotate`` may form float32 angles."""
    with pytest.raises(AssertionError, match=r"if `rotate` forms float32 angles"):
        testing.assert_shift_invariance(
            rope_fn(fp.RopeConfig(head_dim=8)), Q, K, SHIFT_POSITIONS, [10**6],
            angle_precision="exact",
        )  # fmt: skip
    with pytest.raises(ValueError, match=r"check it with assert_bias_shift_invariance"):
        testing.assert_shift_invariance(
            rope_fn(fp.RopeConfig(head_dim=8)), Q, K, SHIFT_POSITIONS, [10**7]
        )


def sinusoidal16(p):
    return fp.sinusoidal_encoding(p, 16)


def rope8(x, p):
    return fp.apply_rope(x, p, fp.RopeConfig(head_dim=8))


X = normal((4, 2, 8))  # [L, N, H]
GOOD_ARGUMENTS = {
    testing.assert_shift_invariance: dict(
        rotate=rope8, q=X, k=X, positions=np.arange(4), offsets=[1]
    ),
    testing.assert_relative_offset_linearity: dict(
        encode=sinusoidal16, positions=np.arange(40), offsets=[1]
    ),
    testing.assert_encoding_shape: dict(
        encoding=jnp.zeros((4, 16)), positions=jnp.arange(4), dim=16
    ),
    testing.assert_module_shapes: dict(
        inputs=jnp.zeros((2, 4)),
        outputs=jnp.zeros((2, 4)),
        dims=chex.Dimensions(B=2, L=4),
        spec="BL",
    ),
    testing.assert_bias_shift_invariance: dict(
        bias=fp.AlibiBias(2),
        q_positions=np.arange(4),
        offsets=[1],
        k_positions=None,
        atol=None,
    ),
}
BIAS = testing.assert_bias_shift_invariance
SHIFT = testing.assert_shift_invariance
LINEAR = testing.assert_relative_offset_linearity
SHAPE = testing.assert_encoding_shape
MODULE = testing.assert_module_shapes
BAD_ARGUMENTS = [
    # assert_shift_invariance
    (SHIFT, "rotate", None, TypeError, r"`rotate` must be a function"),
    (SHIFT, "q", X.tolist(), TypeError, r"`q` must be a jax or numpy array"),
    (SHIFT, "q", jnp.ones((4, 2, 8), jnp.int32), TypeError, r"`q` must be floating"),
    (SHIFT, "q", X[0], ValueError, r"`q` must be \[..., L, N, H\] \(rank >= 3\)"),
    (SHIFT, "k", X[..., :4], ValueError, r"`k` must be \[..., L, K, H\]"),
    (SHIFT, "k", X[:3], ValueError, r"`k` must be .* got shape \(3, 2, 8\)"),
    (SHIFT, "q", normal((4, 3, 8)), ValueError, r"`q` heads \(3\) must be a multiple"),
    (SHIFT, "positions", np.arange(4.0), TypeError, r"`positions` must be integers"),
    (SHIFT, "positions", np.arange(0), ValueError, r"`positions` must be a non-empty"),
    (SHIFT, "positions", np.arange(5), ValueError, r"`positions` must be \[..., L\]"),
    (SHIFT, "positions", np.zeros((3, 4), int), ValueError, r"broadcastable to q"),
    (SHIFT, "offsets", [], ValueError, r"`offsets` must name at least one"),
    (SHIFT, "offsets", 3, TypeError, r"`offsets` must be a sequence of ints"),
    (SHIFT, "offsets", [1.5], TypeError, r"`offsets` must hold ints, got 1.5"),
    (SHIFT, "offsets", [2**31], ValueError, r"`offsets`: .* outside int32"),
    (SHIFT, "rtol", 0.0, ValueError, r"`rtol` must be a finite number > 0, got 0.0"),
    (SHIFT, "rtol", "1e-3", TypeError, r"`rtol` must be a number"),
    (SHIFT, "rtol", 0.5, ValueError, r"`rtol` must be at most LARGEST_RTOL = 0.125"),
    (SHIFT, "angle_precision", "x64", ValueError, r"`angle_precision` must be one"),
    # assert_relative_offset_linearity
    (LINEAR, "encode", "sinusoidal", TypeError, r"`encode` must be a function"),
    (LINEAR, "positions", [], ValueError, r"`positions` must be a non-empty"),
    (LINEAR, "positions", np.zeros((2, 40), int), ValueError, r"\[P\] \(rank 1\)"),
    (LINEAR, "positions", np.arange(40.0), TypeError, r"`positions` must be integers"),
    (LINEAR, "positions", np.arange(8), ValueError, r"outnumber the encoding's rank"),
    (LINEAR, "offsets", [], ValueError, r"`offsets` must name at least one"),
    (LINEAR, "offsets", [True], TypeError, r"`offsets` must hold ints, got True"),
    (LINEAR, "rtol", -1e-4, ValueError, r"`rtol` must be a finite number > 0"),
    # assert_encoding_shape
    (SHAPE, "encoding", [[0.0] * 16] * 4, TypeError, r"`encoding` must be a jax"),
    (SHAPE, "positions", [0, 1, 2, 3], TypeError, r"`positions` must be a jax"),
    (SHAPE, "dim", 0, ValueError, r"`dim` must be a positive int, got 0"),
    (SHAPE, "dim", 16.0, TypeError, r"`dim` must be a positive int, got 16.0"),
    (SHAPE, "dtype", "float99", TypeError, r"`dtype` must be a dtype"),
    # assert_module_shapes
    (MODULE, "inputs", None, TypeError, r"`inputs` must be a jax or numpy array"),
    (MODULE, "outputs", np.zeros(3).tolist(), TypeError, r"`outputs` must be a jax"),
    (MODULE, "dims", {"B": 2, "L": 4}, TypeError, r"`dims` must be a chex.Dimensions"),
    (MODULE, "spec", 3, TypeError, r"`spec` must be a string"),
    (MODULE, "spec", "BX", ValueError, r"`spec` 'BX' names dimension 'X'"),
    # assert_bias_shift_invariance
    (BIAS, "bias", np.ones((2, 4, 4)), TypeError, r"`bias` must be a function"),
    (BIAS, "bias", lambda q, k: [0.0], TypeError, r"`bias\(q_positions, k_posi"),
    (BIAS, "q_positions", np.arange(4.0), TypeError, r"`q_positions` must be integ"),
    (BIAS, "q_positions", [], ValueError, r"`q_positions` must be a non-empty"),
    (BIAS, "k_positions", np.zeros(0, int), ValueError, r"`k_positions` must be a n"),
    (BIAS, "offsets", [], ValueError, r"`offsets` must name at least one"),
    (BIAS, "offsets", [2**31 - 3], ValueError, r"`offsets`: .* outside int32"),
    (BIAS, "atol", 0.0, ValueError, r"`atol` must be a finite number > 0, got 0.0"),
]


def test_good_arguments_pass():
    for assertion, kwargs in GOOD_ARGUMENTS.items():
        assertion(**kwargs)


@pytest.mark.parametrize(
    "assertion,argument,value,error,match",
    BAD_ARGUMENTS,
    ids=[f"{a.__name__}-{arg}-{i}" for i, (a, arg, *_) in enumerate(BAD_ARGUMENTS)],
)
def test_bad_arguments_raise(assertion, argument, value, error, match):
    kwargs = dict(GOOD_ARGUMENTS[assertion], **{argument: value})
    with pytest.raises(error, match=match):
        assertion(**kwargs)


def test_every_argument_has_a_bad_input_case():
    """A new argument of an assertion needs a row in BAD_ARGUMENTS."""
    for assertion in GOOD_ARGUMENTS:
        covered = {arg for a, arg, *_ in BAD_ARGUMENTS if a is assertion}
        assert covered == set(inspect.signature(assertion).parameters), assertion
