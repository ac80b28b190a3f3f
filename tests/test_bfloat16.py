"""The CPU rotation's bfloat16 <-> float32 conversions (bit operations,
``flax_posenc._core.cpu``) equal XLA's ``convert``, the ``astype`` of the reference
rotation every accelerator runs, bit for bit: every bfloat16 value widened, and
float32 values narrowed at the rounding boundaries (ties, one ulp either side),
specials and random bits; their gradients are the casts'."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flax_posenc._core.cpu import _narrow as narrow
from flax_posenc._core.cpu import _widen as widen

ALL_BF16_BITS = np.arange(2**16, dtype=np.uint32)


def _bits(x: jax.Array, dtype) -> np.ndarray:
    return np.asarray(jax.lax.bitcast_convert_type(x, dtype))


def test_widen_is_exact_for_every_bfloat16_value():
    x = jax.lax.bitcast_convert_type(
        jnp.asarray(ALL_BF16_BITS.astype(np.uint16)), jnp.bfloat16
    )
    got, want = jax.jit(widen)(x), x.astype(jnp.float32)
    assert got.dtype == jnp.float32
    nan = np.isnan(np.asarray(want))
    np.testing.assert_array_equal(
        _bits(got, jnp.uint32)[~nan], _bits(want, jnp.uint32)[~nan]
    )
    assert np.isnan(np.asarray(got)[nan]).all()


BOUNDARIES = np.concatenate(
    [
        (ALL_BF16_BITS << 16) | low  # ties (0x8000) and one float32 ulp either side
        for low in (0x7FFF, 0x8000, 0x8001, 0x0001, 0xFFFF)
    ]
)
SPECIALS = np.array(
    [
        0x7F800000,  # inf
        0xFF800000,  # -inf
        0x7F7FFFFF,  # the largest float32: rounds to inf
        0x7F7F8000,  # a tie just below bfloat16's largest: to even (inf)
        0x00000001,  # smallest subnormal: to +0
        0x80400000,  # a negative subnormal kept
        0x7F800001,  # NaNs whose payload lies below bit 16 must not become inf
        0xFF800001,
        0x7FC00000,
    ],
    np.uint32,
)
RANDOM = np.random.default_rng(0).integers(0, 2**32, 200_000, dtype=np.uint64)


@pytest.mark.parametrize(
    "bits",
    [BOUNDARIES, SPECIALS, RANDOM.astype(np.uint32)],
    ids=["boundaries", "specials", "random"],
)
def test_narrow_rounds_like_xla(bits):
    y = jax.lax.bitcast_convert_type(jnp.asarray(bits), jnp.float32)
    got = jax.jit(lambda y: narrow(y, jnp.bfloat16))(y)
    want = y.astype(jnp.bfloat16)
    assert got.dtype == jnp.bfloat16
    nan = np.isnan(np.asarray(y))
    np.testing.assert_array_equal(
        _bits(got, jnp.uint16)[~nan], _bits(want, jnp.uint16)[~nan]
    )
    assert np.isnan(np.asarray(got.astype(jnp.float32))[nan]).all()


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.float32])
def test_other_dtypes_use_astype(dtype):
    x = jnp.asarray([1.0, 1 / 3, 65504.0], dtype)
    np.testing.assert_array_equal(widen(x), x.astype(jnp.float32))
    y = jnp.asarray([1 / 3, 1e-8], jnp.float32)
    np.testing.assert_array_equal(narrow(y, dtype), y.astype(dtype))


def test_gradients_flow_as_through_astype():
    """The bit operations have no derivative of their own: the casts' is used."""
    x = jnp.asarray([0.5, -2.0, 3.0], jnp.bfloat16)

    def loss(convert):
        return lambda x: (convert(x) ** 2).sum()

    got = jax.jit(
        jax.grad(
            loss(lambda x: narrow(widen(x) * 3.0, jnp.bfloat16).astype(jnp.float32))
        )
    )(x)
    want = jax.grad(
        loss(
            lambda x: (
                (x.astype(jnp.float32) * 3.0).astype(jnp.bfloat16).astype(jnp.float32)
            )
        )
    )(x)
    np.testing.assert_array_equal(
        np.asarray(got, np.float32), np.asarray(want, np.float32)
    )
    assert np.all(np.asarray(got, np.float32) != 0)
