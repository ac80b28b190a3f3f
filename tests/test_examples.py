"""The examples' model code: shapes per encoding, compile counts, decoding."""

import dataclasses
import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import flax_posenc

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "examples"))

import copy_task
import decode
import hf_config
import streaming
import train_context_parallel
import training
import transformer
import transformer_linen
from helpers import normal

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
ENCODINGS = transformer.ENCODINGS
TRAIN = training.TrainConfig(steps=3, batch_size=4, n_train=4, eval_batch_size=4)
ABSOLUTE = ("sinusoidal", "learned")
# Not functions of offsets alone: absolute encodings, and FIRE past its threshold
# (it normalises distances by the query position).
SHIFT_VARIANT = (*ABSOLUTE, "fire")


def small_model(encoding: str) -> transformer.Transformer:
    config = training.model_config(encoding, TRAIN, max_factor=4)
    return training.init_model(config, seed=0)


def batch(n: int, batch_size: int = 2) -> copy_task.Batch:
    return copy_task.make_batch(
        jax.random.key(0),
        batch_size=batch_size,
        n_max=n,
        num_symbols=TRAIN.num_symbols,
        variable_length=False,
    )


def test_copy_batch_layout():
    b = copy_task.make_batch(
        jax.random.key(3), batch_size=8, n_max=5, num_symbols=9, variable_length=True
    )
    for tokens, targets, mask in zip(b.tokens, b.targets, b.mask, strict=True):
        seq = np.append(np.asarray(tokens), targets[-1])
        n = int(np.flatnonzero(seq == copy_task.SEP)[0])
        symbols = seq[:n]
        assert len(set(symbols.tolist())) == n  # distinct
        np.testing.assert_array_equal(seq[n + 1 : 2 * n + 1], symbols)
        assert np.all(seq[2 * n + 1 :] == copy_task.PAD)
        np.testing.assert_array_equal(np.asarray(targets)[np.asarray(mask)], symbols)


# Each encoding compiles a model: with the slow tests.
@pytest.mark.slow
@pytest.mark.parametrize(
    "encoding",
    [e if e == "rope" else pytest.param(e, marks=pytest.mark.slow) for e in ENCODINGS],
)
def test_forward_shift_and_cached_decoding(encoding):
    """Per encoding: logits shapes; relative encodings see only offsets (shifting
    every position by 7 keeps the logits) while absolute ones do not; greedy decoding
    with the KV cache equals full recomputation (at 2x the training length, with the
    evaluation-time RoPE scaling)."""
    model = transformer.extend_context(small_model(encoding), 2)
    b = batch(n=5)
    prompt, steps = b.tokens[:, :6], 4
    graphdef, params = nnx.split(model)
    # The shape decode_full compiles for: [B, prompt + steps - 1].
    tokens, positions = b.tokens[:, :9], b.positions[:, :9]
    logits, cache = decode._forward(graphdef, params, tokens, positions, None)
    shifted, _ = decode._forward(graphdef, params, tokens, positions + 7, None)
    assert cache is None
    assert logits.shape == (2, 9, copy_task.vocab_size(TRAIN.num_symbols))
    assert logits.dtype == jnp.float32
    assert np.all(np.isfinite(logits))
    if encoding in SHIFT_VARIANT:
        assert np.max(np.abs(shifted - logits)) > 1e-2
    else:
        np.testing.assert_allclose(shifted, logits, atol=2e-5)
    decoded = decode.check_decoding(model, prompt, steps)
    assert decoded.tokens.shape == (2, steps)


@pytest.mark.slow  # compiles a model per encoding (cached decoding: test_decode.py)
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_left_padded_decoding(encoding):
    """Prompts of 1..5 symbols, left-padded into one batch: cached decoding equals
    full recomputation (each sequence writes at its own cache index, whatever its
    position), and every row equals decoding that prompt alone, unpadded (padding is
    never attended to, by the cached or the full forward)."""
    model = transformer.extend_context(small_model(encoding), 2)
    b = copy_task.make_batch(
        jax.random.key(5),
        batch_size=4,
        n_max=5,
        num_symbols=TRAIN.num_symbols,
        variable_length=True,
    )
    prompts = decode.left_padded_prompts(b)
    lengths = np.asarray(prompts.valid.sum(axis=-1))
    assert len(set(lengths.tolist())) > 1, lengths  # really of different lengths
    # A prefill at positions 10.. (a later chunk of a long text) writes the cache's
    # slots 0..P-1, not slots = positions, and records positions and padding.
    graphdef, params = nnx.split(model)
    tokens, valid = prompts.tokens, prompts.valid
    positions = flax_posenc.positions_from_padding_mask(valid) + 10
    cache = transformer.init_cache(model.config, 4, tokens.shape[1])
    full, _ = decode._forward(graphdef, params, tokens, positions, None, valid)
    cached, cache = decode._forward(graphdef, params, tokens, positions, cache, valid)
    real = np.asarray(valid)
    np.testing.assert_allclose(
        np.asarray(cached)[real], np.asarray(full)[real], atol=1e-4, rtol=1e-4
    )
    np.testing.assert_array_equal(cache.index, [tokens.shape[1]] * 4)
    np.testing.assert_array_equal(cache.valid, valid)
    np.testing.assert_array_equal(cache.positions, positions)

    steps = prompts.answer.shape[1]
    padded = decode.check_decoding(model, tokens, steps, valid)
    for row, length in enumerate(lengths):
        alone = decode.decode_cached(model, tokens[row : row + 1, -length:], 2)
        np.testing.assert_allclose(
            padded.logits[row, :2], alone.logits[0], atol=1e-4, rtol=1e-4
        )


def test_left_padded_prompts_layout():
    b = copy_task.make_batch(
        jax.random.key(5), batch_size=8, n_max=5, num_symbols=9, variable_length=True
    )
    prompts = decode.left_padded_prompts(b)
    for tokens, valid, answer, answer_mask, n in zip(
        *map(np.asarray, prompts), np.asarray(b.mask.sum(-1)), strict=True
    ):
        assert not valid[: 5 - n].any() and valid[5 - n :].all()
        assert np.all(tokens[: 5 - n] == copy_task.PAD) and tokens[-1] == copy_task.SEP
        np.testing.assert_array_equal(answer[answer_mask], tokens[5 - n : -1])
        assert answer_mask.sum() == n


@pytest.mark.slow  # compiles a model's train step
def test_train_step_compiles_once():
    model = small_model("rope")
    graphdef, params = nnx.split(model)
    tx = training.make_optimizer(TRAIN)
    opt_state = tx.init(params)
    step = training.make_train_step(graphdef, tx, TRAIN)
    losses = []
    for i in range(3):  # max_traces(1) raises on a retrace
        params, opt_state, loss = step(params, opt_state, jax.random.key(i))
        losses.append(float(loss))
    assert step._cache_size() == 1
    assert losses[-1] < losses[0]


def test_max_traces_catches_a_retrace():
    f = jax.jit(training.max_traces(1)(lambda x: 2 * x))
    f(jnp.ones(3))
    f(jnp.zeros(3))
    with pytest.raises(AssertionError, match="traced 2 times"):
        f(jnp.ones(4))


@pytest.mark.slow  # compiles a model per encoding
@pytest.mark.parametrize("encoding", ("learned", "rope_yarn"))
def test_evaluate_compiles_once_per_length(encoding):
    model = small_model(encoding)
    # evaluate() builds its step with max_traces(len(factors)): a second compile
    # of any length would raise.
    accuracy = training.evaluate(model, TRAIN, (1, 2))
    assert set(accuracy) == {1, 2}
    assert all(0.0 <= a <= 1.0 for a in accuracy.values())


def test_hf_config_inline_phi3_lists_match_the_fixture():
    fixture = json.loads((FIXTURES / "hf_rope.json").read_text())
    (case,) = [
        c for c in fixture["cases"] if c["name"] == "longrope_phi3_mini_128k_long"
    ]
    assert hf_config.PHI_3_MINI_128K == case["config"]


def test_hf_config_llama3_wavelengths():
    """Llama 3 keeps wavelengths below original / high_freq_factor (2048) and
    multiplies those above original / low_freq_factor (8192) by the factor 8."""
    config = flax_posenc.rope_config_from_hf(hf_config.LLAMA_3_1_8B)
    plain = dataclasses.replace(config, scaling=None)
    scaled, attention_scaling = hf_config.wavelengths(config, None)
    base, _ = hf_config.wavelengths(plain, None)
    i = np.arange(64, dtype=np.float64)
    np.testing.assert_allclose(base, 2 * np.pi * 500000.0 ** (2 * i / 128), rtol=1e-6)
    short, long = base < 2048, base > 8192
    np.testing.assert_allclose(scaled[short], base[short], rtol=1e-6)
    np.testing.assert_allclose(scaled[long], 8 * base[long], rtol=1e-6)
    assert attention_scaling == 1.0


@pytest.mark.slow  # two models each (the modules' linen == nnx: test_*_modules.py)
@pytest.mark.parametrize("encoding", ("rope", "alibi"))
def test_linen_block_equals_nnx_block(encoding):
    """The linen block with the nnx block's parameters gives the same output, with
    RoPE tables or an ALiBi bias, with and without a KV cache."""
    model = small_model(encoding)
    config = model.config
    b = batch(n=4)
    x = normal((2, 8, config.d_model), seed=1)
    positions = b.positions
    mask = (positions[:, None, :] <= positions[:, :, None])[:, None]
    rope = bias = None
    if model.rope is not None:
        rope = flax_posenc.rope_cos_sin(positions, model.rope)
    else:
        bias = model.attention_bias(positions, positions)
    cache = transformer.init_cache(config, 2, 8)
    slots = transformer.write_slots(cache, 8)
    block = model.blocks[0]
    params = {"params": nnx.to_pure_dict(nnx.state(block))}
    for layer_cache in (None, cache.layers[0]):
        kwargs = dict(rope=rope, bias=bias, mask=mask, cache=layer_cache, slots=slots)
        want, want_cache = block(x, **kwargs)
        got, got_cache = transformer_linen.Block(config).apply(params, x, **kwargs)
        np.testing.assert_allclose(got, want, atol=1e-6)
        if layer_cache is not None:
            np.testing.assert_allclose(got_cache.k, want_cache.k, atol=1e-6)


@pytest.mark.slow
def test_streaming_reindexes_the_cache_with_rope_shift():
    """Sink + window decoding 3x past the cache: after every step the cached keys
    (shifted by rope_shift at each eviction) equal the tapped raw keys rotated at
    their new contiguous positions (asserted inside ``stream``)."""
    model = small_model("rope")
    policy = streaming.Streaming(n_sink=2, window=6, evict=3)
    prompt = batch(n=3).tokens[:, :4]
    tokens, worst, evictions = streaming.stream(model, prompt, 24, policy)
    assert tokens.shape == (2, 24)
    # 4 + 23 tokens written into 8 slots, 3 freed per eviction.
    assert evictions == -(-(4 + 23 - policy.slots) // policy.evict) == 7
    assert worst < streaming.ATOL


def test_streaming_eviction_keeps_the_sinks_and_shifts_the_window():
    """One eviction by hand: sinks keep slot, key and position; the window moves
    down ``evict`` slots, its keys rotated by -evict positions."""
    config = training.model_config("rope", TRAIN, max_factor=1)
    rope = flax_posenc.RopeConfig(head_dim=config.head_dim)
    policy = streaming.Streaming(n_sink=1, window=4, evict=2)
    raw = normal((1, 5, config.num_heads, config.head_dim), seed=0)
    positions = jnp.arange(5)[None]
    cache = transformer.Cache(
        (transformer.KVCache(flax_posenc.apply_rope(raw, positions, rope), raw),),
        positions=positions,
        valid=jnp.ones((1, 5), bool),
        index=jnp.array([5]),
    )
    evicted, (moved,) = streaming.evict_oldest(cache, (raw,), rope=rope, policy=policy)
    np.testing.assert_array_equal(moved[0, :3], raw[0, [0, 3, 4]])
    np.testing.assert_array_equal(evicted.valid, [[True, True, True, False, False]])
    np.testing.assert_array_equal(evicted.index, [3])
    np.testing.assert_array_equal(evicted.positions, [[0, 1, 2, 3, 4]])
    want = flax_posenc.apply_rope(moved, evicted.positions, rope)
    np.testing.assert_allclose(evicted.layers[0].k[:, :3], want[:, :3], atol=1e-6)
    np.testing.assert_array_equal(evicted.layers[0].v[0, :3], raw[0, [0, 3, 4]])


@pytest.mark.slow  # two models trained side by side on 8 devices: ~25 s each
@pytest.mark.parametrize("encoding", ["rope", "alibi"])
def test_context_parallel_training_losses_equal_one_device(encoding):
    """examples/train_context_parallel.py: the demo model with its sequence split
    over 8 devices (ring attention, load-balanced layout) trains with the losses of
    the unsharded model; the train step communicates by permutes and the gradient
    all-reduce only, never an all-gather."""
    config = dataclasses.replace(train_context_parallel.QUICK, steps=2, batch_size=2)
    result = train_context_parallel.train(encoding, config, jax.devices()[:8])
    np.testing.assert_allclose(result["ring"], result["plain"], rtol=1e-5)
    assert set(result["collectives"]) == {"collective-permute", "all-reduce"}
