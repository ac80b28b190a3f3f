"""The test that matters most: for every encoding, a small causal attention layer
decoded token by token with a KV cache gives the outputs of one full forward pass,
for plain, packed and left-padded batches; and a sequence packed with others gets the
outputs it gets alone.

The layer is written out (projections, encoding, masked softmax) so that only the
encodings and position helpers of flax_posenc are under test; a second test runs the
same check through Flax's own ``nnx.MultiHeadAttention(decode=True)`` with
:func:`flax_posenc.positional_attention_fn`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import normal, normals

import flax_posenc as fp
from flax_posenc import nnx as posenc_nnx

B, T, N, H = 2, 12, 2, 8
D = N * H
WQ, WK, WV = (w / np.sqrt(D) for w in normals(3, (D, N, H)))
LEARNED_TABLE = normal((64, D), seed=3)
T5_TABLE = normal((32, N), seed=4)
SEQ_LEN = T  # fixed for the seq_len-dependent families, so every step agrees
LONG = dict(original_max_position_embeddings=8)


@dataclasses.dataclass(frozen=True)
class Encoding:
    absolute: Callable | None = None
    rope: fp.RopeConfig | None = None
    bias: Callable | None = None


def rope(**kwargs):
    return Encoding(rope=fp.RopeConfig(head_dim=H, **kwargs))


ENCODINGS = {
    "none": Encoding(),
    "sinusoidal": Encoding(absolute=lambda p: fp.sinusoidal_encoding(p, D)),
    "learned": Encoding(
        absolute=lambda p: fp.learned_embedding_lookup(LEARNED_TABLE, p)
    ),
    "rope": rope(),
    "rope_interleaved_partial": rope(rotary_dim=4, layout="interleaved"),
    "rope_linear": rope(scaling=fp.LinearScaling(factor=4.0)),
    "rope_ntk": rope(scaling=fp.NTKScaling(factor=2.0)),
    "rope_dynamic_ntk": rope(scaling=fp.DynamicNTKScaling(factor=2.0, **LONG)),
    "rope_yarn": rope(scaling=fp.YarnScaling(factor=4.0, **LONG)),
    "rope_longrope": rope(
        scaling=fp.LongRopeScaling(
            short_factor=(1.0, 1.5, 2.0, 3.0),
            long_factor=(1.0, 2.0, 4.0, 8.0),
            factor=4.0,
            **LONG,
        )
    ),
    "rope_llama3": rope(
        scaling=fp.Llama3Scaling(
            factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, **LONG
        )
    ),
    "alibi": Encoding(bias=lambda q, k: fp.alibi_bias(q, k, N)),
    "t5": Encoding(
        bias=lambda q, k: fp.relative_position_bias(T5_TABLE, q, k, bidirectional=False)
    ),
}


def project(encoding, x, positions):
    """x [B, L, D], positions [B, L] -> q, k, v [B, L, N, H]."""
    if encoding.absolute is not None:
        x = x + encoding.absolute(positions)
    q, k, v = (jnp.einsum("bld,dnh->blnh", x, w) for w in (WQ, WK, WV))
    if encoding.rope is not None:
        q = fp.apply_rope(q, positions, encoding.rope, seq_len=SEQ_LEN)
        k = fp.apply_rope(k, positions, encoding.rope, seq_len=SEQ_LEN)
    return q, k, v


def attend(encoding, q, k, v, q_positions, k_positions, mask):
    """Masked softmax attention; mask [B, L, S] is True where a query may attend."""
    logits = jnp.einsum("blnh,bsnh->bnls", q, k) / np.sqrt(H)
    if encoding.bias is not None:
        logits = logits + encoding.bias(q_positions, k_positions)
    logits = jnp.where(mask[:, None], logits, -1e30)
    return jnp.einsum("bnls,bsnh->blnh", jax.nn.softmax(logits, axis=-1), v)


def allowed(segments_q, segments_k, q_index, k_index):
    """Causal, same segment, and no padding (segment 0)."""
    same = segments_q[:, :, None] == segments_k[:, None, :]
    causal = k_index[None, None, :] <= q_index[None, :, None]
    return same & causal & (segments_k[:, None, :] != 0)


@jax.jit
def full_forward_all(x, positions, segments):
    index = jnp.arange(T)
    mask = allowed(segments, segments, index, index)
    return {
        name: attend(enc, *project(enc, x, positions), positions, positions, mask)
        for name, enc in ENCODINGS.items()
    }


@jax.jit
def decode_all(x, positions, segments):
    """Token by token; each step writes its k/v into a cache of T slots."""
    outputs = {}
    for name, enc in ENCODINGS.items():

        def step(t, carry, enc=enc):
            cache_k, cache_v, out = carry
            x_t = jax.lax.dynamic_slice_in_dim(x, t, 1, axis=1)
            pos_t = jax.lax.dynamic_slice_in_dim(positions, t, 1, axis=1)
            seg_t = jax.lax.dynamic_slice_in_dim(segments, t, 1, axis=1)
            q, k, v = project(enc, x_t, pos_t)
            cache_k = jax.lax.dynamic_update_slice_in_dim(cache_k, k, t, axis=1)
            cache_v = jax.lax.dynamic_update_slice_in_dim(cache_v, v, t, axis=1)
            mask = allowed(seg_t, segments, t[None], jnp.arange(T))
            y = attend(enc, q, cache_k, cache_v, pos_t, positions, mask)
            return (
                cache_k,
                cache_v,
                jax.lax.dynamic_update_slice_in_dim(out, y, t, axis=1),
            )

        empty = jnp.zeros((B, T, N, H))
        outputs[name] = jax.lax.fori_loop(0, T, step, (empty, empty, empty))[2]
    return outputs


X = normal((B, T, D), seed=5)
PACKED = jnp.array([[1] * 5 + [2] * 4 + [3] * 3, [1] * 7 + [2] * 3 + [0] * 2])
LEFT_PADDED = jnp.array([[0] * 4 + [1] * 8, [1] * 12])


def batches():
    plain = jnp.ones((B, T), jnp.int32)
    return {
        "plain": (fp.positions_from_segment_ids(plain), plain),
        "packed": (fp.positions_from_segment_ids(PACKED), PACKED),
        "left_padded": (fp.positions_from_padding_mask(LEFT_PADDED > 0), LEFT_PADDED),
    }


@pytest.mark.slow
@pytest.mark.parametrize("batch", ["plain", "packed", "left_padded"])
def test_cached_decoding_equals_full_forward(batch):
    positions, segments = batches()[batch]
    full = full_forward_all(X, positions, segments)
    decoded = decode_all(X, positions, segments)
    real = np.asarray(segments != 0)
    for name in ENCODINGS:
        np.testing.assert_allclose(
            np.asarray(decoded[name])[real],
            np.asarray(full[name])[real],
            atol=1e-5,
            rtol=1e-5,
            err_msg=name,
        )


def test_decode_step_positions_continue_the_prompt():
    prompt = LEFT_PADDED > 0
    positions = fp.positions_from_padding_mask(prompt)
    step = fp.positions_from_offsets(jnp.sum(prompt, axis=-1))
    np.testing.assert_array_equal(step[:, 0], positions[:, -1] + 1)


def test_packed_sequence_gets_its_outputs_alone():
    positions = fp.positions_from_segment_ids(PACKED)
    packed = full_forward_all(X, positions, PACKED)
    for row, segment in [(0, 2), (1, 1)]:
        (index,) = np.nonzero(np.asarray(PACKED[row]) == segment)
        alone = jnp.zeros_like(X).at[:, : len(index)].set(X[row, index])
        alone_segments = jnp.zeros((B, T), jnp.int32).at[:, : len(index)].set(1)
        alone_positions = fp.positions_from_segment_ids(alone_segments)
        single = full_forward_all(alone, alone_positions, alone_segments)
        for name in ENCODINGS:
            np.testing.assert_allclose(
                np.asarray(packed[name])[row, index],
                np.asarray(single[name])[0, : len(index)],
                atol=1e-6,
                rtol=1e-6,
                err_msg=name,
            )


@pytest.mark.slow
@pytest.mark.parametrize(
    "encoding", ["rope", pytest.param("alibi", marks=pytest.mark.slow), "t5"]
)
def test_flax_multi_head_attention_decode_matches_full(encoding):
    """Flax's own cached attention with positional_attention_fn as the drop-in."""
    config = fp.RopeConfig(head_dim=H)
    t5 = posenc_nnx.RelativePositionBias(N, bidirectional=False, rngs=nnx.Rngs(1))

    def attention_fn(q_positions, k_positions):
        if encoding == "rope":
            return fp.positional_attention_fn(
                rope=config, q_positions=q_positions, k_positions=k_positions
            )
        if encoding == "alibi":
            bias = fp.alibi_bias(q_positions, k_positions, N)
        else:
            bias = t5(q_positions, k_positions)
        return fp.positional_attention_fn(bias=bias)

    mha = nnx.MultiHeadAttention(
        num_heads=N, in_features=D, decode=False, rngs=nnx.Rngs(0)
    )
    positions = jnp.arange(T)[None]

    @nnx.jit
    def full_forward(mha, x):
        causal = nnx.make_causal_mask(jnp.ones((B, T)))
        with fp.attention_fn_override(mha, attention_fn(positions, positions)):
            return mha(x, mask=causal)

    @nnx.jit
    def decode_step(mha, x_t, t):
        with fp.attention_fn_override(mha, attention_fn(t.reshape(1, 1), positions)):
            return mha(x_t, decode=True)

    full = full_forward(mha, X)
    mha.init_cache((B, T, D))
    steps = [decode_step(mha, X[:, t : t + 1], jnp.asarray(t)) for t in range(T)]
    np.testing.assert_allclose(jnp.concatenate(steps, 1), full, atol=1e-5, rtol=1e-5)


def test_hf_longrope_length_is_the_current_query_not_the_cache_size():
    """Phi-3's policy: every token of a step uses the current length, the last
    query position + 1. A query at position 5 against a 16-slot cache (slots 6..15
    not yet written) has length 6; the cache size 16 would switch to the long
    factors past the original length 8 a step too early."""
    config = fp.RopeConfig(
        head_dim=H,
        scaling=fp.LongRopeScaling((1.0,) * 4, (2.0,) * 4, 8, factor=4.0),
    )
    seq_len, k_seq_len = fp.hf_decode_seq_lens(
        config, jnp.array([5]), jnp.arange(16), prompt_length=3
    )
    assert int(seq_len) == int(k_seq_len) == 6
