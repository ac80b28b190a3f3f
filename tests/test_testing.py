"""flax_posenc.testing assertions pass for the right thing and fail for the wrong one."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rope_reference as ref
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
    table = jax.random.normal(jax.random.key(0), (512, 16))

    def encode(p):
        return fp.learned_embedding_lookup(table, p)

    with pytest.raises(AssertionError, match=r"offset k=1: residual"):
        testing.assert_relative_offset_linearity(encode, POSITIONS, offsets=[1])


def test_offset_linearity_needs_more_positions_than_rank():
    encode = functools.partial(fp.sinusoidal_encoding, dim=16)
    with pytest.raises(ValueError, match="must outnumber the encoding's rank"):
        testing.assert_relative_offset_linearity(encode, np.arange(8), offsets=[1])


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


def normal(shape, dtype=jnp.float32, seed=0):
    return jax.random.normal(jax.random.key(seed), shape, jnp.float32).astype(dtype)


Q, K = normal((2, 6, 2, 8)), normal((2, 6, 2, 8), seed=1)
SHIFT_POSITIONS = np.array([[0, 3, 4, 9, 10, 30], [5, 1, 2, 200, 7, 8]])
SHIFT_OFFSETS = [1, 17, 1000]


def rope_fn(config, seq_len=None):
    return jax.jit(lambda x, p: fp.apply_rope(x, p, config, seq_len=seq_len))


@pytest.mark.parametrize("family", ref.FAMILIES)
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
    with pytest.raises(AssertionError, match=f"offset={ref.ORIGINAL}"):
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


@settings(max_examples=12)  # each example compiles a new static config and shape
@given(
    family=st.sampled_from(ref.FAMILIES),
    layout=st.sampled_from(["half", "interleaved"]),
    dtype=st.sampled_from([jnp.float32, jnp.bfloat16]),
    batch=st.sampled_from([(), (2,)]),
    length=st.integers(1, 6),
    heads=st.integers(1, 3),
    head_dim=st.sampled_from([4, 8, 16]),
    partial=st.booleans(),
    data=st.data(),
)
def test_rope_shift_invariance_property(
    family, layout, dtype, batch, length, heads, head_dim, partial, data
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
    shape = (*batch, length, heads, head_dim)
    q, k = normal(shape, dtype, seed=length), normal(shape, dtype, seed=heads + 7)
    seq_len = 8192 if family in ref.SEQ_LEN_FAMILIES else None
    testing.assert_shift_invariance(rope_fn(config, seq_len), q, k, positions, offsets)


def test_shift_invariance_needs_an_offset():
    config = fp.RopeConfig(head_dim=8)
    x = jnp.ones((4, 1, 8))
    with pytest.raises(ValueError, match="`offsets` must name at least one"):
        testing.assert_shift_invariance(
            lambda v, p: fp.apply_rope(v, p, config), x, x, jnp.arange(4), offsets=[]
        )
