"""Every encoder through the same properties: shape, dtype kept, finite values and
gradients, and no retrace when position values change.

Each entry of ``ENCODERS`` maps ``(x [B, L, N, H], positions int [B, L])`` to an array
whose dtype must be ``x.dtype``; absolute encodings see ``x`` as ``[B, L, N * H]``;
attention-bias encodings return self-attention logits ``x . x + bias [B, N, L, L]``.
New encodings add an entry here.
"""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rope_reference as ref
from helpers import normal

import flax_posenc as fp

B, L, N, H = 2, 6, 2, 8
LEARNED_TABLE = normal((64, N * H), seed=3)
ROPE = fp.RopeConfig(head_dim=H)
RELATIVE_TABLE = normal((32, N), seed=4)
KERPLE = (jnp.array([0.3, -1.0]), jnp.array([-0.5, 1.0]))  # unconstrained [N]
FIRE = fp.FireParams(
    c=jnp.array(0.1),
    threshold_multiplier=jnp.array(1.0),
    hidden_kernel=normal((8,), seed=5),
    hidden_bias=jnp.zeros(8),
    output_kernel=normal((8, N), seed=6),
    output_bias=jnp.zeros(N),
)
COPE_TABLE = normal((L + 1, H), seed=7)


def cope_logits(x, positions):
    """CoPE reads the content: logits x . x + its bias, both [B, N, L, L]."""
    x32 = x.astype(jnp.float32)
    logits = jnp.einsum(
        "blnh,bsnh->bnls", x32, x32, precision=jax.lax.Precision.HIGHEST
    )
    bias = fp.cope_bias(x, x, COPE_TABLE, q_positions=positions, k_positions=positions)
    return (logits + bias).astype(x.dtype)


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
    "kerple_log": add_bias(lambda p: fp.kerple_bias(p, p, *KERPLE)),
    "kerple_power": add_bias(lambda p: fp.kerple_bias(p, p, *KERPLE, kernel="power")),
    "fire": add_bias(lambda p: fp.fire_bias(p, p, FIRE, init_threshold=8.0)),
    "cope": cope_logits,
    "sinusoidal": add_absolute(lambda p: fp.sinusoidal_encoding(p, N * H)),
    "sinusoidal_t2t": add_absolute(
        lambda p: fp.sinusoidal_encoding(
            p, N * H, layout="half", spacing="tensor2tensor"
        )
    ),
    "sinusoidal_exact": add_absolute(
        lambda p: fp.sinusoidal_encoding(p, N * H, angle_precision="exact")
    ),
    "learned": add_absolute(lambda p: fp.learned_embedding_lookup(LEARNED_TABLE, p)),
    "rope_interleaved_partial": lambda x, p: fp.apply_rope(
        x, p, fp.RopeConfig(head_dim=H, rotary_dim=H // 2, layout="interleaved")
    ),
    "rope_exact_interleaved_partial": lambda x, p: fp.apply_rope(
        x,
        p,
        fp.RopeConfig(
            head_dim=H, rotary_dim=H // 2, layout="interleaved", angle_precision="exact"
        ),
    ),
    "axial_rope_2d": lambda x, p: fp.apply_axial_rope(
        x, jnp.stack([p // 3, p % 3], axis=-1), ROPE
    ),
    "mrope": lambda x, p: fp.apply_mrope(
        x, jnp.stack([p, p // 2, p % 3]), ROPE, mrope_section=(2, 1, 1)
    ),
    "xpos_query": lambda x, p: fp.apply_xpos(x, p, ROPE, is_key=False, center=20),
    "xpos_key": lambda x, p: fp.apply_xpos(x, p, ROPE, is_key=True, center=20),
}
# RoPE, plain and one per scaling family. The offsets below take dynamic NTK and
# LongRoPE (original length 16) across their switch without a retrace. The families
# with static frequencies (plain's path with other numbers) run with `slow`.
SLOW_ENCODERS = set()
for _family in ref.FAMILIES:
    if _family in ("yarn_mscale", "yarn_untruncated"):
        continue
    _config = ref.make_config(_family, head_dim=H, original=16)
    ENCODERS[f"rope_{_family}"] = functools.partial(fp.apply_rope, config=_config)
    if _family not in ("plain", *ref.SEQ_LEN_FAMILIES):
        SLOW_ENCODERS.add(f"rope_{_family}")


# bfloat16 by default (where a dtype slips); float32 and float16 with `slow`.
@pytest.mark.parametrize(
    "dtype",
    [
        pytest.param(jnp.float32, marks=pytest.mark.slow),
        jnp.bfloat16,
        pytest.param(jnp.float16, marks=pytest.mark.slow),
    ],
)
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.slow) if name in SLOW_ENCODERS else name
        for name in sorted(ENCODERS)
    ],
)
def test_encoder_properties(name, dtype):
    encoder = ENCODERS[name]
    x = normal((B, L, N, H), dtype, seed=0)
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
