"""A small T5-bias model trained through the Pallas flash kernel, bias in the kernel.

A one-layer causal language model learns to repeat the token three places back: only
position tells it where to look, and here position is T5's learned relative bias
(:class:`flax_posenc.RelativeBias`, 32 causal buckets) with RoPE on q and k. Its
attention is :func:`flax_posenc.blockwise_attention` with ``implementation=``:

* ``"xla"``, the reference kernel;
* the Pallas kernel (``"pallas_gpu"`` on a GPU, ``"pallas_tpu"`` on a TPU; on a CPU
  the GPU kernel in Pallas's interpreter, ``"pallas_gpu_interpret"``), which computes
  the bias per tile inside the kernel and returns the T5 table's gradient from it.

Both train from the same initial parameters on the same batches; the script prints
their losses side by side (they agree to float32 rounding) and the final accuracy.

Run: ``python examples/attention_kernels.py`` (``--quick`` for CI; ``--kernel
pallas_tpu_interpret`` for the TPU kernel in the interpreter).
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import optax

import flax_posenc as fp

VOCAB, LAG, HEADS, HEAD_DIM, WIDTH, BUCKETS = 16, 3, 4, 32, 128, 32


def init(key: jax.Array) -> dict:
    """The model's parameters: embedding, q/k/v and output projections, T5 table."""
    keys = jax.random.split(key, 4)
    normal = lambda key, shape, scale: scale * jax.random.normal(key, shape)
    return {
        "embed": normal(keys[0], (VOCAB, WIDTH), 1.0),
        "qkv": normal(keys[1], (WIDTH, 3, HEADS, HEAD_DIM), WIDTH**-0.5),
        "out": normal(keys[2], (HEADS, HEAD_DIM, VOCAB), (HEADS * HEAD_DIM) ** -0.5),
        "table": jnp.zeros((BUCKETS, HEADS)),
    }


def logits(params: dict, tokens: jax.Array, implementation: str) -> jax.Array:
    """``[B, L, VOCAB]``: one attention layer over the embedded tokens."""
    x = params["embed"][tokens]
    q, k, v = jnp.einsum("bld,dthe->tblhe", x, params["qkv"])
    positions = jnp.arange(tokens.shape[1])
    blocks = {"block_q": 32, "block_k": 128 if "tpu" in implementation else 32}
    attended = fp.blockwise_attention(
        q, k, v, q_positions=positions, causal=True,
        bias=fp.RelativeBias(params["table"], bidirectional=False),
        rope=fp.RopeConfig(head_dim=HEAD_DIM), implementation=implementation,
        **blocks,
    )  # fmt: skip
    return jnp.einsum("blhe,hev->blv", attended, params["out"])


def batch(key: jax.Array, size: int, length: int) -> tuple[jax.Array, jax.Array]:
    """Random tokens and their targets, the token ``LAG`` places back (-1: none)."""
    tokens = jax.random.randint(key, (size, length), 0, VOCAB)
    targets = jnp.concatenate([jnp.full((size, LAG), -1), tokens[:, :-LAG]], axis=1)
    return tokens, targets


def loss_and_accuracy(params, tokens, targets, implementation):
    scores = logits(params, tokens, implementation)
    valid = targets >= 0
    losses = optax.softmax_cross_entropy_with_integer_labels(
        scores, jnp.maximum(targets, 0)
    )
    correct = (scores.argmax(-1) == targets) & valid
    return (losses * valid).sum() / valid.sum(), correct.sum() / valid.sum()


def train(implementation: str, steps: int, length: int) -> tuple[list, float]:
    params = init(jax.random.key(0))
    optimizer = optax.adam(3e-3)
    state = optimizer.init(params)

    @jax.jit
    def step(params, state, key):
        tokens, targets = batch(key, 8, length)
        (loss, _), grads = jax.value_and_grad(loss_and_accuracy, has_aux=True)(
            params, tokens, targets, implementation
        )
        updates, state = optimizer.update(grads, state)
        return optax.apply_updates(params, updates), state, loss

    losses = []
    for key in jax.random.split(jax.random.key(1), steps):
        params, state, loss = step(params, state, key)
        losses.append(float(loss))
    tokens, targets = batch(jax.random.key(2), 32, length)
    _, accuracy = loss_and_accuracy(params, tokens, targets, implementation)
    return losses, float(accuracy)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny run, for CI")
    parser.add_argument("--kernel", default=None, help="a Pallas implementation")
    args = parser.parse_args()
    default = {"gpu": "pallas_gpu", "tpu": "pallas_tpu"}.get(jax.default_backend())
    kernel = args.kernel or default or "pallas_gpu_interpret"
    steps, length = (4, 32) if args.quick else (150, 64)
    runs = {name: train(name, steps, length) for name in ("xla", kernel)}
    print(f"step  {'xla':>10s}  {kernel:>22s}")
    for index in range(0, steps, max(1, steps // 10)):
        row = [runs[name][0][index] for name in runs]
        print(f"{index:4d}  {row[0]:10.5f}  {row[1]:22.5f}")
    gap = np.max(np.abs(np.subtract(runs["xla"][0], runs[kernel][0])))
    print(f"largest loss difference: {gap:.2e}")
    for name, (_, accuracy) in runs.items():
        print(f"{name}: accuracy on a fresh batch {accuracy:.3f}")


if __name__ == "__main__":
    main()
