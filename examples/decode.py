"""Greedy decoding of a left-padded batch with a KV cache, checked against full
recomputation.

Trains a model per encoding briefly on the copy task, gives it prompts
``x_1 .. x_n SEP`` of different lengths ``n``, left-padded into one batch, and decodes
greedily twice:

* cached: one prefill of the padded prompts, then one token at a time. Each sequence
  writes its tokens at its own running cache index, the cache records each slot's
  position and masks the padding slots; each new key is rotated (RoPE) or biased
  (ALiBi, T5) at its own position, the query sits at the current one, and it attends
  to the real cached tokens at theirs;
* full: at every step the whole padded sequence so far is recomputed from scratch.

It asserts both give the same tokens and logits, then prints how much of each prompt
the models copied, at the training length and at 2x (where ``rope_linear`` /
``rope_yarn`` use their evaluation-time scaling).

Run: ``python examples/decode.py`` (``--quick`` for a small run, ``--encodings rope
t5``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from typing import NamedTuple

import copy_task
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from training import TrainConfig, train_encodings
from transformer import ENCODINGS, Transformer, extend_context, init_cache

import flax_posenc as fp

DEFAULT = TrainConfig(steps=600)
QUICK = TrainConfig(steps=20, batch_size=16, n_train=4)
FACTORS = (1, 2)  # --quick: 2 only


class Prompts(NamedTuple):
    """Left-padded prompts and the answers they ask for.

    ``tokens int [B, P]`` with ``valid bool [B, P]`` false on the padding (on the
    left: every prompt ends at column ``P - 1``); ``answer int [B, A]`` with
    ``answer_mask bool [B, A]`` true on each prompt's ``n`` answer tokens.
    """

    tokens: jax.Array
    valid: jax.Array
    answer: jax.Array
    answer_mask: jax.Array


def left_padded_prompts(batch: copy_task.Batch) -> Prompts:
    """The prompts ``x_1 .. x_n SEP`` of a copy batch, left-padded to ``n_max + 1``."""
    n = jnp.sum(batch.mask, axis=-1, keepdims=True)  # [B, 1] symbols per example
    n_max = batch.tokens.shape[1] // 2
    i = jnp.arange(n_max + 1)[None]
    source = i - (n_max - n)  # column i holds prompt token i - (padding width)
    valid = source >= 0
    tokens = jnp.take_along_axis(batch.tokens, jnp.maximum(source, 0), axis=1)
    j = jnp.arange(n_max)[None]
    answer = jnp.take_along_axis(batch.targets, jnp.minimum(n + j, 2 * n_max - 1), 1)
    return Prompts(jnp.where(valid, tokens, copy_task.PAD), valid, answer, j < n)


class Decoded(NamedTuple):
    """Greedy continuation ``tokens int [B, T]`` and the logits ``[B, T, V]`` that
    chose each token."""

    tokens: jax.Array
    logits: jax.Array


@functools.partial(jax.jit, static_argnums=0)
def _forward(graphdef, params, tokens, positions, cache, valid=None):
    return nnx.merge(graphdef, params)(tokens, positions, cache, valid)


def _all_valid(prompt: jax.Array, valid: jax.Array | None) -> jax.Array:
    return jnp.ones(prompt.shape, bool) if valid is None else valid


def decode_cached(
    model: Transformer, prompt: jax.Array, steps: int, valid: jax.Array | None = None
) -> Decoded:
    """Prefills ``prompt [B, P]`` (left-padded where ``valid [B, P]`` is false) into
    a cache, then decodes one token at a time.

    The cache has ``P + steps - 1`` slots: the last token chosen is never fed back.
    Prompt tokens sit at ``positions_from_padding_mask(valid)``; sequence ``b``'s
    ``t``-th new token at ``lengths[b] + t``.
    """
    graphdef, params = nnx.split(model)
    batch, length = prompt.shape
    valid = _all_valid(prompt, valid)
    cache = init_cache(model.config, batch, length + steps - 1)
    positions = fp.positions_from_padding_mask(valid)
    logits, cache = _forward(graphdef, params, prompt, positions, cache, valid)
    lengths = jnp.sum(valid, axis=-1)  # [B]: real prompt tokens per sequence
    new_valid = jnp.ones((batch, 1), bool)
    last = logits[:, -1]
    tokens, chosen = [jnp.argmax(last, axis=-1)], [last]
    for t in range(1, steps):
        position = fp.positions_from_offsets(lengths + t - 1)  # [B, 1]
        logits, cache = _forward(
            graphdef, params, tokens[-1][:, None], position, cache, new_valid
        )
        last = logits[:, -1]
        tokens.append(jnp.argmax(last, axis=-1))
        chosen.append(last)
    return Decoded(jnp.stack(tokens, axis=1), jnp.stack(chosen, axis=1))


def decode_full(
    model: Transformer, prompt: jax.Array, steps: int, valid: jax.Array | None = None
) -> Decoded:
    """The same greedy decoding, recomputing the whole sequence at every step.

    The sequence lives in a buffer of ``P + steps - 1`` tokens (one compiled shape);
    causal attention keeps the unfilled tail out of the logits read, the padding mask
    keeps the left padding out of all of them.
    """
    graphdef, params = nnx.split(model)
    batch, length = prompt.shape
    buffer = jnp.zeros((batch, length + steps - 1), prompt.dtype)
    buffer = buffer.at[:, :length].set(prompt)
    valid = jnp.ones(buffer.shape, bool).at[:, :length].set(_all_valid(prompt, valid))
    positions = fp.positions_from_padding_mask(valid)
    tokens, chosen = [], []
    for t in range(steps):
        logits, _ = _forward(graphdef, params, buffer, positions, None, valid)
        last = logits[:, length + t - 1]
        tokens.append(jnp.argmax(last, axis=-1))
        chosen.append(last)
        if t < steps - 1:
            buffer = buffer.at[:, length + t].set(tokens[-1])
    return Decoded(jnp.stack(tokens, axis=1), jnp.stack(chosen, axis=1))


def check_decoding(
    model: Transformer, prompt: jax.Array, steps: int, valid: jax.Array | None = None
) -> Decoded:
    """Decodes both ways and asserts they agree (tokens exactly, logits to 1e-4)."""
    cached = decode_cached(model, prompt, steps, valid)
    full = decode_full(model, prompt, steps, valid)
    np.testing.assert_array_equal(cached.tokens, full.tokens)
    np.testing.assert_allclose(cached.logits, full.logits, atol=1e-4, rtol=1e-4)
    return cached


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny run, for CI")
    parser.add_argument(
        "--encodings", nargs="+", choices=ENCODINGS, default=list(ENCODINGS)
    )
    parser.add_argument("--steps", type=int, help="training steps per encoding")
    parser.add_argument("--batch", type=int, default=4, help="prompts decoded at once")
    args = parser.parse_args()
    train = QUICK if args.quick else DEFAULT
    if args.steps:
        train = dataclasses.replace(train, steps=args.steps)

    factors = (2,) if args.quick else FACTORS
    runs = train_encodings(args.encodings, train, max_factor=max(factors))
    prompts = {}
    for factor in factors:
        batch = copy_task.make_batch(
            jax.random.key(train.seed + 2),
            batch_size=args.batch,
            n_max=factor * train.n_train,
            num_symbols=train.num_symbols,
            variable_length=True,  # prompts of different lengths, left-padded
        )
        prompts[factor] = left_padded_prompts(batch)
    print(
        f"greedy decoding of the copy (trained on n <= {train.n_train}): batches of "
        f"{args.batch} left-padded prompts of 1 <= n <= factor * {train.n_train} "
        "symbols; cached == full recomputation asserted for every row"
    )
    print("| encoding | " + " | ".join(f"copied @{f}x" for f in factors) + " |")
    print("| --- |" + " --- |" * len(factors))
    for run in runs:
        copied = []
        for factor, p in prompts.items():
            model = extend_context(run.model, factor)
            decoded = check_decoding(model, p.tokens, p.answer.shape[1], p.valid)
            right = jnp.sum((decoded.tokens == p.answer) & p.answer_mask)
            copied.append(f"{float(right / jnp.sum(p.answer_mask)):.0%}")
        print(f"| {run.encoding} | " + " | ".join(copied) + " |")


if __name__ == "__main__":
    main()
