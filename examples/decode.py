"""Greedy decoding with a KV cache, checked against full recomputation.

Trains a model per encoding briefly on the copy task, gives it the prompt
``x_1 .. x_n SEP`` and decodes ``n`` tokens greedily twice:

* cached: one prefill of the prompt, then one token at a time; each new key is rotated
  (RoPE) or biased (ALiBi, T5) at its own position and stored, the query sits at the
  current position, and it attends to the cache slots at theirs;
* full: at every step the whole sequence so far is recomputed from scratch.

It asserts both give the same tokens and logits, then prints how much of the prompt
each model copied, at the training length and at 2x (where ``rope_linear`` /
``rope_yarn`` use their evaluation-time scaling).

Run: ``python examples/decode.py`` (``--quick`` for CI, ``--encodings rope t5``).
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
from training import TrainConfig, prefer_fast_compilation, train_encodings
from transformer import ENCODINGS, Transformer, extend_context, init_cache

DEFAULT = TrainConfig(steps=600)
QUICK = TrainConfig(steps=20, batch_size=16, n_train=4)
FACTORS = (1, 2)  # --quick: 2 only


class Decoded(NamedTuple):
    """Greedy continuation ``tokens int [B, T]`` and the logits ``[B, T, V]`` that
    chose each token."""

    tokens: jax.Array
    logits: jax.Array


@functools.partial(jax.jit, static_argnums=0)
def _forward(graphdef, params, tokens, positions, cache):
    return nnx.merge(graphdef, params)(tokens, positions, cache)


def decode_cached(model: Transformer, prompt: jax.Array, steps: int) -> Decoded:
    """Prefills ``prompt [B, P]`` into a cache, then decodes one token at a time.

    The cache has ``P + steps - 1`` slots: the last token chosen is never fed back.
    """
    graphdef, params = nnx.split(model)
    batch, length = prompt.shape
    cache = init_cache(model.config, batch, length + steps - 1)
    positions = jnp.broadcast_to(jnp.arange(length), prompt.shape)
    logits, cache = _forward(graphdef, params, prompt, positions, cache)
    last = logits[:, -1]
    tokens, chosen = [jnp.argmax(last, axis=-1)], [last]
    for t in range(1, steps):
        position = jnp.full((batch, 1), length + t - 1)
        logits, cache = _forward(graphdef, params, tokens[-1][:, None], position, cache)
        last = logits[:, -1]
        tokens.append(jnp.argmax(last, axis=-1))
        chosen.append(last)
    return Decoded(jnp.stack(tokens, axis=1), jnp.stack(chosen, axis=1))


def decode_full(model: Transformer, prompt: jax.Array, steps: int) -> Decoded:
    """The same greedy decoding, recomputing the whole sequence at every step.

    The sequence lives in a buffer of ``P + steps - 1`` tokens (one compiled shape);
    causal attention keeps the unfilled tail out of the logits read.
    """
    graphdef, params = nnx.split(model)
    batch, length = prompt.shape
    buffer = jnp.zeros((batch, length + steps - 1), prompt.dtype)
    buffer = buffer.at[:, :length].set(prompt)
    positions = jnp.broadcast_to(jnp.arange(buffer.shape[1]), buffer.shape)
    tokens, chosen = [], []
    for t in range(steps):
        logits, _ = _forward(graphdef, params, buffer, positions, None)
        last = logits[:, length + t - 1]
        tokens.append(jnp.argmax(last, axis=-1))
        chosen.append(last)
        if t < steps - 1:
            buffer = buffer.at[:, length + t].set(tokens[-1])
    return Decoded(jnp.stack(tokens, axis=1), jnp.stack(chosen, axis=1))


def check_decoding(model: Transformer, prompt: jax.Array, steps: int) -> Decoded:
    """Decodes both ways and asserts they agree (tokens exactly, logits to 1e-4)."""
    cached = decode_cached(model, prompt, steps)
    full = decode_full(model, prompt, steps)
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
    if args.quick:
        prefer_fast_compilation()
    train = QUICK if args.quick else DEFAULT
    if args.steps:
        train = dataclasses.replace(train, steps=args.steps)

    factors = (2,) if args.quick else FACTORS
    runs = train_encodings(args.encodings, train, max_factor=max(factors))
    prompts = {}
    for factor in factors:
        n = factor * train.n_train
        batch = copy_task.make_batch(
            jax.random.key(train.seed + 2),
            batch_size=args.batch,
            n_max=n,
            num_symbols=train.num_symbols,
            variable_length=False,
        )
        prompts[factor] = (batch.tokens[:, : n + 1], batch.targets[:, n:])
    print(
        f"greedy decoding of the copy (trained on n <= {train.n_train}); "
        "cached == full recomputation asserted for every row"
    )
    print("| encoding | " + " | ".join(f"copied @{f}x" for f in factors) + " |")
    print("| --- |" + " --- |" * len(factors))
    for run in runs:
        copied = []
        for factor, (prompt, answer) in prompts.items():
            model = extend_context(run.model, factor)
            decoded = check_decoding(model, prompt, answer.shape[1])
            copied.append(f"{float(jnp.mean(decoded.tokens == answer)):.0%}")
        print(f"| {run.encoding} | " + " | ".join(copied) + " |")


if __name__ == "__main__":
    main()
