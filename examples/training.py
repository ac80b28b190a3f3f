"""Training and evaluation of :class:`transformer.Transformer` on the copy task.

The model is split once into a static graph definition and a parameter pytree; the
train step is a pure ``jax.jit`` function of (params, optimizer state, key), compiled
once (:func:`max_traces` raises on any retrace). Evaluation compiles once per sequence
length.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence

import copy_task
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from tqdm.auto import tqdm
from transformer import (
    ROPE_ENCODINGS,
    Config,
    Transformer,
    count_params,
    extend_context,
)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Optimisation and task sizes."""

    steps: int = 1200
    batch_size: int = 64
    n_train: int = 8
    num_symbols: int = 64
    learning_rate: float = 3e-3
    warmup_steps: int = 100
    weight_decay: float = 0.01
    eval_batch_size: int = 128
    seed: int = 0


@dataclasses.dataclass
class Trained:
    """A trained model and how its training went."""

    encoding: str
    model: Transformer
    losses: np.ndarray
    steps_per_s: float

    @property
    def params(self) -> int:
        return count_params(self.model)


def max_traces(n: int) -> Callable[[Callable], Callable]:
    """Decorator: raises ``AssertionError`` when JAX traces the function more than
    ``n`` times (put it under ``jax.jit``). Unlike ``chex.assert_max_traces``, the
    count belongs to each decorated closure, so every ``make_*_step`` call starts
    afresh."""

    def decorate(fn: Callable) -> Callable:
        traces = 0

        @functools.wraps(fn)
        def traced(*args, **kwargs):
            nonlocal traces
            traces += 1
            if traces > n:
                raise AssertionError(
                    f"{fn.__name__} traced {traces} times, expected at most {n}."
                )
            return fn(*args, **kwargs)

        return traced

    return decorate


def make_optimizer(train: TrainConfig) -> optax.GradientTransformation:
    """AdamW with linear warm-up and cosine decay, gradients clipped at norm 1."""
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=train.learning_rate,
        warmup_steps=train.warmup_steps,
        decay_steps=max(train.steps, train.warmup_steps + 1),
        end_value=train.learning_rate / 20,
    )
    return optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(schedule, weight_decay=train.weight_decay),
    )


def masked_loss_and_accuracy(
    logits: jax.Array, batch: copy_task.Batch
) -> tuple[jax.Array, jax.Array]:
    """Mean cross-entropy and accuracy over the answer tokens only."""
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, batch.targets)
    correct = jnp.argmax(logits, axis=-1) == batch.targets
    count = jnp.maximum(batch.mask.sum(), 1)
    loss = jnp.where(batch.mask, losses, 0.0).sum() / count
    accuracy = jnp.where(batch.mask, correct, False).sum() / count
    return loss, accuracy


def make_train_step(
    graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
    train: TrainConfig,
    *,
    position_sampling: str = "arange",
    max_position: int | None = None,
) -> Callable:
    """``step(params, opt_state, key) -> (params, opt_state, loss)``, jitted once.

    ``position_sampling`` / ``max_position``: where the training tokens sit (see
    ``copy_task.make_batch``; ``Config.position_sampling``)."""

    @jax.jit
    @max_traces(1)
    def train_step(params, opt_state, key):
        batch = copy_task.make_batch(
            key,
            batch_size=train.batch_size,
            n_max=train.n_train,
            num_symbols=train.num_symbols,
            variable_length=True,
            position_sampling=position_sampling,
            max_position=max_position,
        )

        def loss_fn(params):
            logits, _ = nnx.merge(graphdef, params)(batch.tokens, batch.positions)
            return masked_loss_and_accuracy(logits, batch)[0]

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train_step


def make_eval_step(max_lengths: int) -> Callable:
    """``step(graphdef, params, batch) -> accuracy``: one compile per length (and
    per RoPE scaling), at most ``max_lengths`` in all."""

    @max_traces(max_lengths)
    def eval_step(graphdef, params, batch):
        logits, _ = nnx.merge(graphdef, params)(batch.tokens, batch.positions)
        return masked_loss_and_accuracy(logits, batch)[1]

    return jax.jit(eval_step, static_argnums=0)


def evaluate(
    model: Transformer,
    train: TrainConfig,
    factors: Sequence[int],
) -> dict[int, float]:
    """Teacher-forced answer accuracy at ``n = factor * n_train`` for each factor."""
    eval_step = make_eval_step(len(factors))
    key = jax.random.key(train.seed + 1)
    accuracy = {}
    for factor in factors:
        scaled = extend_context(model, factor)
        batch = copy_task.make_batch(
            jax.random.fold_in(key, factor),
            batch_size=train.eval_batch_size,
            n_max=factor * train.n_train,
            num_symbols=train.num_symbols,
            variable_length=False,
        )
        graphdef, params = nnx.split(scaled)
        accuracy[factor] = float(eval_step(graphdef, params, batch))
    return accuracy


def model_config(encoding: str, train: TrainConfig, max_factor: int) -> Config:
    """The model used for ``encoding`` on this task."""
    return Config(
        vocab_size=copy_task.vocab_size(train.num_symbols),
        encoding=encoding,
        train_len=2 * train.n_train,
        max_len=2 * train.n_train * max_factor,
    )


def init_model(config: Config, seed: int) -> Transformer:
    """A fresh model, initialised under one ``jit`` (eager initialisation would
    compile every initialiser separately)."""
    return nnx.jit(lambda: Transformer(config, rngs=nnx.Rngs(seed)))()


def abstract_model(config: Config) -> Transformer:
    """The model's structure with shape-only parameters (nothing computed), to be
    filled with ``nnx.update``."""
    return nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0)))


def train_model(
    config: Config, train: TrainConfig, *, progress: bool = True
) -> tuple[Transformer, np.ndarray, float]:
    """Trains a fresh model; returns it, the loss per step and steps/s (compile
    excluded: the first step is timed separately)."""
    graphdef, params = nnx.split(init_model(config, train.seed))
    tx = make_optimizer(train)
    opt_state = tx.init(params)
    train_step = make_train_step(
        graphdef,
        tx,
        train,
        position_sampling=config.position_sampling,
        max_position=config.max_len,
    )
    keys = jax.random.split(jax.random.key(train.seed), train.steps)
    losses = []
    bar = tqdm(range(train.steps), desc=f"{config.encoding:>11}", disable=not progress)
    start = None
    for step in bar:
        params, opt_state, loss = train_step(params, opt_state, keys[step])
        losses.append(loss)
        if step == 0:
            jax.block_until_ready(loss)
            start = time.perf_counter()
        if step % 50 == 0 or step == train.steps - 1:
            bar.set_postfix(loss=f"{float(loss):.3f}")
    jax.block_until_ready(params)
    elapsed = time.perf_counter() - start
    steps_per_s = (train.steps - 1) / elapsed if train.steps > 1 else float("nan")
    return nnx.merge(graphdef, params), np.asarray(losses), steps_per_s


def train_encodings(
    encodings: Sequence[str],
    train: TrainConfig,
    *,
    max_factor: int,
    progress: bool = True,
) -> list[Trained]:
    """Trains one model per encoding, sized for ``max_factor * n_train`` symbols.

    The RoPE scaling families train exactly as plain RoPE and differ only at
    evaluation time (:func:`transformer.extend_context`), so all of ``rope``,
    ``rope_linear`` and ``rope_yarn`` share the weights (and losses, and speed) of
    the first of them trained.
    """
    runs: list[Trained] = []
    for encoding in encodings:
        config = model_config(encoding, train, max_factor)
        plain = next((r for r in runs if r.encoding in ROPE_ENCODINGS), None)
        if encoding in ROPE_ENCODINGS and plain is not None:
            model = abstract_model(config)
            nnx.update(model, nnx.state(plain.model))
            runs.append(Trained(encoding, model, plain.losses, plain.steps_per_s))
        else:
            runs.append(
                Trained(encoding, *train_model(config, train, progress=progress))
            )
    return runs
