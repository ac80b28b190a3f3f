"""Every encoder through the same properties: shape, dtype kept, finite values and
gradients, and no retrace when position values change.

Each entry of ``ENCODERS`` maps ``(x [B, L, N, H], positions int [B, L])`` to an array
whose dtype must be ``x.dtype``; absolute encodings see ``x`` as ``[B, L, N * H]``;
attention-bias encodings return self-attention logits ``x . x + bias [B, N, L, L]``.
New encodings add an entry here.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flax_posenc as fp

B, L, N, H = 2, 6, 2, 8
LEARNED_TABLE = jax.random.normal(jax.random.key(3), (64, N * H))
RELATIVE_TABLE = jax.random.normal(jax.random.key(4), (32, N))


def add_absolute(encoding_fn):
    def encoder(x, positions):
        embeddings = x.reshape(x.shape[:2] + (N * H,))
        encoding = encoding_fn(positions).astype(jnp.float32)
        return (embeddings.astype(jnp.float32) + encoding).astype(x.dtype)

    return encoder


def add_bias(bias_fn):
    def encoder(x, positions):
        x32 = x.astype(jnp.float32)
        logits = jnp.einsum(
            "blnh,bsnh->bnls", x32, x32, precision=jax.lax.Precision.HIGHEST
        )
        return (logits + bias_fn(positions).astype(jnp.float32)).astype(x.dtype)

    return encoder


ENCODERS = {
    "alibi": add_bias(lambda p: fp.alibi_bias(p, p, N)),
    "relative": add_bias(lambda p: fp.relative_position_bias(RELATIVE_TABLE, p, p)),
    "relative_causal": add_bias(
        lambda p: fp.relative_position_bias(
            RELATIVE_TABLE, p, p, bidirectional=False, max_distance=20
        )
    ),
    "sinusoidal": add_absolute(lambda p: fp.sinusoidal_encoding(p, N * H)),
    "sinusoidal_t2t": add_absolute(
        lambda p: fp.sinusoidal_encoding(
            p, N * H, layout="concat", spacing="tensor2tensor"
        )
    ),
    "learned": add_absolute(lambda p: fp.learned_embedding_lookup(LEARNED_TABLE, p)),
}


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("name", sorted(ENCODERS))
def test_encoder_properties(name, dtype):
    encoder = ENCODERS[name]
    x = jax.random.normal(jax.random.key(0), (B, L, N, H), dtype)
    chex.clear_trace_counter()

    @jax.jit
    @chex.assert_max_traces(n=1)
    def run(x, positions):
        return encoder(x, positions)

    for offset in (0, 5, 40):
        positions = jnp.broadcast_to(jnp.arange(L) + offset, (B, L))
        out = run(x, positions)
        assert out.dtype == dtype
        chex.assert_tree_all_finite(out)

    def loss(x):
        return jnp.sum(encoder(x, positions).astype(jnp.float32) ** 2)

    grad = jax.jit(jax.grad(loss))(x)
    chex.assert_shape(grad, x.shape)
    chex.assert_tree_all_finite(grad)
    assert np.any(np.asarray(grad, np.float32) != 0)
