"""Context-parallel training of the demo transformer: the sequence split over devices.

Every sequence of the copy task (``tokens``, ``positions``, ``targets``, ``mask``, all
``[B, T]``) is split along ``T`` over the mesh axis ``"seq"``; parameters and optimizer
state are replicated. Attention is :func:`flax_posenc.sharded_ring_attention`: each
device keeps its queries and passes key/value blocks around the ring, with RoPE or
ALiBi computed from the tokens' *global* positions, so the model is the demo's own
(``examples/transformer.py``, the same parameters) with only its attention core
replaced. The tokens are laid out load-balanced
(:func:`flax_posenc.load_balanced_permutation`: device ``i`` holds chunks ``i`` and
``2n - 1 - i``), and the positions travel with them, so causal masking stays right.

The script trains the sharded model and, side by side, the unsharded demo model from
the same initial parameters on the same batches, and checks that their losses agree
to float32 rounding (the first steps to 1e-5; later ones drift apart only as float32
rounding of different summation orders accumulates through Adam).

On a machine without accelerators it simulates ``--devices`` CPU devices.

Run: ``python examples/train_context_parallel.py`` (``--quick`` for CI, ``--encoding
alibi``).
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import time

import copy_task
import jax
import jax.numpy as jnp
import numpy as np
import optax
import training
from flax import nnx
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import flax_posenc as fp

ENCODINGS = ("rope", "alibi")
QUICK = training.TrainConfig(steps=4, batch_size=8, n_train=8, warmup_steps=2)
FULL = training.TrainConfig(steps=300, batch_size=32, n_train=8, warmup_steps=30)
COLLECTIVES = re.compile(
    r"(?<![\w.-])(all-gather|all-reduce|all-to-all|collective-permute|"
    r"reduce-scatter)(?:-start)?\("
)


def ring_logits(model, tokens, positions, *, mesh):
    """The demo ``Transformer``'s logits with ring attention over ``mesh``'s
    ``"seq"`` axis: the same modules, RoPE / ALiBi from the global positions."""
    config = model.config
    bias = fp.AlibiBias(config.num_heads) if config.encoding == "alibi" else None
    x = model.embed(tokens)
    for block in model.blocks:
        qkv = block.attention.qkv(block.norm1(x))
        attended = fp.sharded_ring_attention(
            qkv[:, :, 0],
            qkv[:, :, 1],
            qkv[:, :, 2],
            mesh=mesh,
            axis_name="seq",
            q_positions=positions,
            rope=model.rope,
            bias=bias,
            causal=True,
            block_q=8,
            block_k=8,
        )
        x = x + block.attention.out(attended)
        x = x + block.mlp_out(jax.nn.gelu(block.mlp_in(block.norm2(x))))
    return model.unembed(model.norm(x))


def make_steps(graphdef, tx, mesh):
    """``(ring_step, plain_step)``, each ``(params, opt_state, batch) -> (params,
    opt_state, loss)``; the first runs on the mesh with the sequence sharded."""

    def step(forward, params, opt_state, batch):
        def loss_fn(params):
            logits = forward(nnx.merge(graphdef, params), batch)
            return training.masked_loss_and_accuracy(logits, batch)[0]

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    def ring(model, batch):
        return ring_logits(model, batch.tokens, batch.positions, mesh=mesh)

    def plain(model, batch):
        return model(batch.tokens, batch.positions)[0]

    replicated = NamedSharding(mesh, P())
    by_sequence = NamedSharding(mesh, P(None, "seq"))  # every [B, T] field
    ring_step = jax.jit(
        functools.partial(step, ring),
        in_shardings=(replicated, replicated, by_sequence),
        out_shardings=replicated,
    )
    return ring_step, jax.jit(functools.partial(step, plain))


def load_balanced(batch: copy_task.Batch, num_devices: int) -> copy_task.Batch:
    """Every field permuted along ``T`` (tokens and their positions together); the
    masked mean loss does not depend on the order."""
    perm = fp.load_balanced_permutation(batch.tokens.shape[1], num_devices)
    return copy_task.Batch(*(jnp.take(x, perm, axis=1) for x in batch))


def train(encoding: str, train_config: training.TrainConfig, devices: list) -> dict:
    """Trains the sharded and the unsharded model side by side; their losses."""
    mesh = jax.make_mesh(
        (len(devices),), ("seq",), axis_types=(AxisType.Auto,), devices=devices
    )
    config = training.model_config(encoding, train_config, max_factor=1)
    graphdef, params = nnx.split(training.init_model(config, train_config.seed))
    tx = training.make_optimizer(train_config)
    ring_step, plain_step = make_steps(graphdef, tx, mesh)
    ring_state = plain_state = (params, tx.init(params))
    keys = jax.random.split(jax.random.key(train_config.seed), train_config.steps)
    make_batch = functools.partial(
        copy_task.make_batch,
        batch_size=train_config.batch_size,
        n_max=train_config.n_train,
        num_symbols=train_config.num_symbols,
        variable_length=True,
    )
    first = load_balanced(make_batch(keys[0]), len(devices))
    compiled = ring_step.lower(*ring_state, first).compile()
    counts: dict[str, int] = {}
    for name in COLLECTIVES.findall(compiled.as_text()):
        counts[name] = counts.get(name, 0) + 1
    ring_losses, plain_losses = [], []
    start = time.perf_counter()
    for key in keys:
        batch = make_batch(key)
        *ring_state, ring_loss = compiled(
            *ring_state, load_balanced(batch, len(devices))
        )
        *plain_state, plain_loss = plain_step(*plain_state, batch)
        ring_losses.append(float(ring_loss))
        plain_losses.append(float(plain_loss))
    return {
        "ring": np.array(ring_losses),
        "plain": np.array(plain_losses),
        "collectives": counts,
        "seconds": time.perf_counter() - start,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoding", default="rope", choices=ENCODINGS)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="a few steps, for CI")
    args = parser.parse_args(argv)
    if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
        jax.config.update("jax_num_cpu_devices", args.devices)  # before JAX starts
    train_config = QUICK if args.quick else FULL
    devices = jax.devices()[: args.devices]
    length = 2 * train_config.n_train
    if len(devices) < args.devices or length % (2 * args.devices):
        raise SystemExit(
            f"need {args.devices} devices with 2 * devices dividing T = {length}, "
            f"have {len(jax.devices())} {jax.devices()[0].platform} devices."
        )
    print(
        f"mesh: {args.devices} x {devices[0].platform} devices, axis 'seq'; T = "
        f"{length} tokens, {length // args.devices} per device (load-balanced)"
    )
    result = train(args.encoding, train_config, devices)
    print(f"collectives in the train step: {result['collectives']}")
    ring, plain = result["ring"], result["plain"]
    for step in range(0, len(ring), max(1, len(ring) // 10)):
        print(f"step {step:4d}  ring {ring[step]:.6f}  one device {plain[step]:.6f}")
    first = min(3, len(ring))
    np.testing.assert_allclose(ring[:first], plain[:first], rtol=1e-5)
    drift = np.max(np.abs(ring - plain) / np.abs(plain))
    print(
        f"{args.encoding}: first {first} losses equal to 1e-5, max relative "
        f"difference over {len(ring)} steps {drift:.1e}; final loss "
        f"{np.mean(ring[-5:]):.4f} ({result['seconds']:.1f} s for both runs)"
    )


if __name__ == "__main__":
    main()
