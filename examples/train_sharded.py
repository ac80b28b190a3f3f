"""Data-parallel training of the demo transformer on a device mesh.

The batch (``tokens``, ``positions``, ``targets``, ``mask``, all ``[B, T]``) is
sharded over the mesh axis ``"data"`` -- the positions travel with their tokens --
while parameters and optimizer state are replicated. One ``jax.jit`` train step is
partitioned by JAX's SPMD partitioner; its only collectives are the all-reduces of
the gradients and the loss, since every positional encoding is computed on the
device that holds its tokens (``tests/test_sharding.py``).

On a machine without accelerators the script simulates ``--devices`` CPU devices
(``jax_num_cpu_devices``, set before JAX starts). It checks that the first step's
loss on the mesh equals the same step on one device, then trains and reports the
answer accuracy on the copy task.

Run: ``python examples/train_sharded.py`` (``--quick`` for CI, ``--encoding alibi``
for another encoding).
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import time

import copy_task
import jax
import numpy as np
import optax
import training
from flax import nnx
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from transformer import ENCODINGS

QUICK = training.TrainConfig(steps=30, batch_size=32, n_train=4, eval_batch_size=32)
COLLECTIVES = re.compile(
    r"(?<![\w.-])(all-gather|all-reduce|all-to-all|collective-permute|"
    r"reduce-scatter)(?:-start)?\("
)


def collective_counts(hlo_text: str) -> dict[str, int]:
    """How many of each collective op the compiled HLO text holds."""
    counts: dict[str, int] = {}
    for name in COLLECTIVES.findall(hlo_text):
        counts[name] = counts.get(name, 0) + 1
    return counts


def make_train_step(graphdef, tx, replicated, by_batch):
    """``step(params, opt_state, batch) -> (params, opt_state, loss)`` on the mesh."""

    def train_step(params, opt_state, batch):
        def loss_fn(params):
            logits, _ = nnx.merge(graphdef, params)(batch.tokens, batch.positions)
            return training.masked_loss_and_accuracy(logits, batch)[0]

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    sharded = jax.jit(
        train_step,
        in_shardings=(replicated, replicated, by_batch),
        out_shardings=replicated,
        donate_argnums=(0, 1),
    )
    return sharded, jax.jit(train_step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoding", default="rope", choices=ENCODINGS)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="a few steps, for CI")
    args = parser.parse_args()
    if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        jax.config.update("jax_num_cpu_devices", args.devices)  # before JAX starts

    train = QUICK if args.quick else training.TrainConfig()
    devices = jax.devices()[: args.devices]
    if len(devices) < args.devices or train.batch_size % args.devices:
        raise SystemExit(
            f"need {args.devices} devices dividing the batch ({train.batch_size}), "
            f"have {len(jax.devices())} {jax.devices()[0].platform} devices."
        )
    mesh = jax.make_mesh(
        (args.devices,), ("data",), axis_types=(AxisType.Auto,), devices=devices
    )
    replicated = NamedSharding(mesh, P())
    by_batch = NamedSharding(mesh, P("data"))  # every [B, T] field, positions too
    print(f"mesh: {args.devices} x {devices[0].platform} devices, axis 'data'")

    config = training.model_config(args.encoding, train, max_factor=1)
    graphdef, params = nnx.split(training.init_model(config, train.seed))
    tx = training.make_optimizer(train)
    params = jax.device_put(params, replicated)
    opt_state = jax.device_put(tx.init(params), replicated)

    def batch_fn(size):
        return jax.jit(
            functools.partial(
                copy_task.make_batch,
                batch_size=size,
                n_max=train.n_train,
                num_symbols=train.num_symbols,
                variable_length=True,
            ),
            out_shardings=by_batch,  # made where it is consumed: no transfer
        )

    make_batch = batch_fn(train.batch_size)
    train_step, one_device_step = make_train_step(graphdef, tx, replicated, by_batch)
    keys = jax.random.split(jax.random.key(train.seed), train.steps)

    first = make_batch(keys[0])
    compiled = train_step.lower(params, opt_state, first).compile()
    print(f"collectives in the train step: {collective_counts(compiled.as_text())}")
    gathered = jax.device_get((params, opt_state, first))
    _, _, want = one_device_step(*gathered)
    losses = []
    start = time.perf_counter()
    for step in range(train.steps):
        batch = first if step == 0 else make_batch(keys[step])
        params, opt_state, loss = compiled(params, opt_state, batch)
        losses.append(loss)
        if step == 0:
            np.testing.assert_allclose(float(loss), float(want), rtol=1e-5)
            print(f"step 0 loss {float(loss):.5f} == one device {float(want):.5f}")
            start = time.perf_counter()
        if step % max(1, train.steps // 10) == 0 or step == train.steps - 1:
            print(f"step {step:5d}  loss {float(loss):.4f}")
    jax.block_until_ready(params)
    steps_per_s = (train.steps - 1) / (time.perf_counter() - start)

    eval_batch = batch_fn(train.eval_batch_size)(jax.random.key(train.seed + 1))

    @jax.jit
    def accuracy(params, batch):
        logits, _ = nnx.merge(graphdef, params)(batch.tokens, batch.positions)
        return training.masked_loss_and_accuracy(logits, batch)[1]

    print(
        f"{args.encoding}: final loss {float(np.mean(losses[-5:])):.4f}, answer "
        f"accuracy {float(accuracy(params, eval_batch)):.3f}, {steps_per_s:.1f} steps/s"
    )


if __name__ == "__main__":
    main()
