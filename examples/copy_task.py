"""A synthetic task where order matters and length generalisation can be measured.

Copy: ``x_1 .. x_n SEP x_1 .. x_n``. The ``n`` symbols are distinct (drawn without
replacement), so each answer token is fully determined by the prompt, and the model is
scored only on the ``n`` answer tokens (teacher-forced next-token accuracy). A model
that has learned the length-independent rule ("find the previous occurrence of the
current token, emit the one after it") copies sequences of any length; one that has
memorised absolute positions fails past the training length.

Training batches mix lengths ``n`` in ``[1, n_train]`` in one fixed shape
``[B, 2 * n_train]`` (padding after the sequence, which causal attention never sees
from the answer tokens); evaluation batches use ``n = factor * n_train`` exactly.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

import flax_posenc as fp

PAD, SEP = 0, 1
FIRST_SYMBOL = 2


class Batch(NamedTuple):
    """Inputs, next-token targets and the answer mask, all ``[B, T]``."""

    tokens: jax.Array
    positions: jax.Array
    targets: jax.Array
    mask: jax.Array


def vocab_size(num_symbols: int) -> int:
    """Symbols plus PAD and SEP."""
    return FIRST_SYMBOL + num_symbols


@functools.partial(
    jax.jit,
    static_argnames=(
        "batch_size",
        "n_max",
        "num_symbols",
        "variable_length",
        "position_sampling",
        "max_position",
    ),
)
def make_batch(
    key: jax.Array,
    *,
    batch_size: int,
    n_max: int,
    num_symbols: int,
    variable_length: bool,
    position_sampling: str = "arange",
    max_position: int | None = None,
) -> Batch:
    """Copy examples of ``n_max`` symbols (or ``n`` uniform in ``[1, n_max]``).

    Inputs are ``seq[:-1]`` of ``seq = x_1..x_n SEP x_1..x_n PAD..`` padded to
    ``2 * n_max + 1``; the mask marks the ``n`` positions whose target is an answer
    token. Jitted, with the sizes static.

    ``position_sampling`` places the ``T = 2 n_max`` tokens: ``"arange"`` at
    ``0..T-1``; ``"randomized"`` at a sorted random subset of ``[0,
    max_position)`` per sequence (:func:`flax_posenc.randomized_positions`);
    ``"pose"`` in two chunks with a random skip (:func:`flax_posenc.pose_positions`).
    """
    if n_max > num_symbols:
        raise ValueError(
            f"`n_max` ({n_max}) must be <= `num_symbols` ({num_symbols}): the "
            "symbols of one example are distinct."
        )
    key_symbols, key_length = jax.random.split(key)
    order = jnp.argsort(
        jax.random.uniform(key_symbols, (batch_size, num_symbols)), axis=-1
    )
    symbols = FIRST_SYMBOL + order[:, :n_max]  # [B, n_max]
    if variable_length:
        n = jax.random.randint(key_length, (batch_size, 1), 1, n_max + 1)
    else:
        n = jnp.full((batch_size, 1), n_max)
    length = 2 * n_max + 1
    i = jnp.broadcast_to(jnp.arange(length), (batch_size, length))
    # position i holds x_{i+1} for i < n, SEP at n, x_{i-n} for n < i <= 2n, then PAD.
    source = jnp.where(i < n, i, i - n - 1)
    gathered = jnp.take_along_axis(symbols, jnp.clip(source, 0, n_max - 1), axis=-1)
    seq = jnp.where(i == n, SEP, jnp.where(i <= 2 * n, gathered, PAD))
    tokens, targets = seq[:, :-1], seq[:, 1:]
    input_index = i[:, :-1]
    mask = (input_index >= n) & (input_index < 2 * n)
    positions = sampled_positions(
        jax.random.fold_in(key, 1), input_index, position_sampling, max_position
    )
    return Batch(tokens, positions, targets, mask)


def sampled_positions(
    key: jax.Array, index: jax.Array, sampling: str, max_position: int | None
) -> jax.Array:
    """``index [B, T]`` itself, or positions sampled over ``[0, max_position)``."""
    if sampling == "arange":
        return index
    if sampling not in ("randomized", "pose"):
        raise ValueError(
            "`position_sampling` must be 'arange', 'randomized' or 'pose', got "
            f"{sampling!r}."
        )
    if max_position is None:
        raise ValueError(f"position_sampling={sampling!r} needs `max_position`.")
    sample = fp.randomized_positions if sampling == "randomized" else fp.pose_positions
    return sample(key, index.shape[1], max_position, batch_shape=index.shape[:1])
