"""transformers' decode policy for dynamic NTK and LongRoPE, against ``generate``.

Truth: ``tests/fixtures/checkpoints/decode_golden.json``, per-step logits of
transformers' own greedy ``generate`` (cached and uncached) for tiny dynamic-NTK
Llama and LongRoPE Phi-3 checkpoints (``tools/make_hf_checkpoints.py``).

A cached ``generate`` rotates each token with the length of the forward that wrote
it; recomputing the whole sequence with those per-token lengths
(:func:`flax_posenc.hf_decode_seq_lens`) reproduces every step's logits.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from test_port_hf import load_decode_cases, port_hf

import flax_posenc as fp

CASES = load_decode_cases()
# Both sides float32 with different summation orders: ~2e-6 on logits of std ~1; a
# wrong frequency moves them by > 1e-2 (asserted below).
ATOL = 1e-4


def _step_logits(name: str, policy: str) -> tuple[np.ndarray, np.ndarray]:
    """Every greedy step's logits under ``policy``, recomputing the whole sequence
    once with per-token lengths, and the golden ones."""
    case = CASES[name]
    model = port_hf.load_checkpoint(case.checkpoint)
    rope = port_hf.read_config(case.checkpoint).rope
    prompt = len(case.input_ids)
    tokens = np.concatenate([case.input_ids, case.tokens[:-1]])
    positions = jnp.arange(len(tokens))
    if policy == "transformers":
        seq_len, k_seq_len = fp.hf_decode_seq_lens(
            rope, positions, positions, prompt_length=prompt
        )
        assert k_seq_len is not None
        seq_len = jnp.broadcast_to(seq_len, positions.shape)
    else:  # one fixed length for every token
        seq_len = len(tokens)
    # One compiled forward (eagerly, every op of every layer compiled on its own).
    logits = nnx.jit(lambda m, t, p, s: m(t, p, seq_len=s))(
        model, jnp.asarray(tokens)[None], positions[None], seq_len
    )[0]
    return np.asarray(logits)[prompt - 1 :], case.logits


def test_dynamic_ntk_transformers_policy_matches_cached_generate():
    got, want = _step_logits("llama_dynamic_ntk_cached", "transformers")
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)


@pytest.mark.slow
def test_dynamic_ntk_fixed_seq_len_differs_from_generate():
    """The other policy is a real choice: it is not what ``generate`` does."""
    got, want = _step_logits("llama_dynamic_ntk_cached", "fixed")
    assert np.max(np.abs(got - want)) > 1e-2


def test_longrope_transformers_policy_matches_generate():
    """Phi-3's generate re-rotates the cache once past the original length, so the
    cached run equals the uncached one; hf_decode_seq_lens gives every token the
    current length."""
    case = CASES["phi3_longrope_cached"]
    rope = port_hf.read_config(case.checkpoint).rope
    model = port_hf.load_checkpoint(case.checkpoint)
    prompt = len(case.input_ids)
    tokens = np.concatenate([case.input_ids, case.tokens[:-1]])
    got = []
    for step in range(len(case.tokens)):
        length = prompt + step
        positions = jnp.arange(length)
        seq_len, k_seq_len = fp.hf_decode_seq_lens(
            rope, positions[-1:], positions, prompt_length=prompt
        )
        assert int(seq_len) == int(k_seq_len) == length
        # One compiled shape: a fixed buffer, causal attention, seq_len = length.
        logits = port_hf.forward(model, jnp.asarray(tokens), jnp.asarray(length))
        got.append(np.asarray(logits)[length - 1])
    np.testing.assert_allclose(np.stack(got), case.logits, rtol=0, atol=ATOL)


@pytest.mark.parametrize("name", ["llama_dynamic_ntk_cached", "phi3_longrope_cached"])
def test_policy_frequencies_equal_the_recorded_forward_calls(name):
    """Each forward of generate records the inv_freq its rotary module used for the
    positions it fed; the policy's per-token lengths give the same frequencies."""
    case = CASES[name]
    rope = port_hf.read_config(case.checkpoint).rope
    prompt = len(case.input_ids)
    for call in case.forward_calls:
        start, stop = call["positions"]
        positions = jnp.arange(start, stop)
        seq_len, _ = fp.hf_decode_seq_lens(
            rope, positions, positions, prompt_length=prompt
        )
        inv_freq, scale = fp.rope_frequencies(rope, seq_len=jnp.max(seq_len))
        np.testing.assert_allclose(
            np.asarray(inv_freq), np.asarray(call["inv_freq"], np.float32), rtol=2e-6
        )
        np.testing.assert_allclose(float(scale), call["attention_scaling"], rtol=1e-6)


def test_static_families_need_no_length():
    config = fp.RopeConfig(head_dim=8, scaling=fp.LinearScaling(factor=2.0))
    assert fp.hf_decode_seq_lens(
        config, jnp.arange(3), jnp.arange(3), prompt_length=2
    ) == (None, None)


def test_k_seq_len_rotates_keys_with_their_own_lengths():
    """apply_rope_qk with the policy's (seq_len, k_seq_len) on a cache of unrotated
    keys equals rotating each key alone with its own length."""
    config = fp.RopeConfig(
        head_dim=8,
        scaling=fp.DynamicNTKScaling(factor=2.0, original_max_position_embeddings=4),
    )
    k = jnp.ones((1, 12, 1, 8))
    q = jnp.ones((1, 1, 1, 8))
    k_positions, q_positions = jnp.arange(12), jnp.array([11])
    seq_len, k_seq_len = fp.hf_decode_seq_lens(
        config, q_positions, k_positions, prompt_length=6
    )
    _, k_rot = fp.apply_rope_qk(
        q,
        k,
        q_positions,
        config,
        k_positions=k_positions,
        seq_len=seq_len,
        k_seq_len=k_seq_len,
    )
    rotate_alone = jax.jit(lambda k, p, s: fp.apply_rope(k, p, config, seq_len=s))
    for j in range(12):
        alone = rotate_alone(
            k[:, j : j + 1], k_positions[j : j + 1], jnp.int32(max(j + 1, 6))
        )
        np.testing.assert_allclose(k_rot[:, j : j + 1], alone, rtol=1e-6, atol=1e-6)
