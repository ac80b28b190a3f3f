"""flax_posenc.testing assertions pass for the right thing and fail for the wrong one."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flax_posenc as fp
from flax_posenc import testing

POSITIONS = np.arange(0, 200, 3)


@pytest.mark.parametrize("layout", ["interleaved", "concat"])
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
