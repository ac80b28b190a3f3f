"""Flash attention with the position bias inside the kernel: time and memory.

For causal attention of bfloat16 q, k, v ``[1, L, N, H]`` (``N = 16``, ``H = 128``
unless told) at each ``L`` of ``--lengths``, times the forward and the forward with
its gradient (dq, dk, dv) of:

* the backend's Pallas kernel (``"pallas_gpu"`` on a GPU, ``"pallas_tpu"`` on a TPU)
  with no bias, ALiBi, T5 buckets (causal, 32 buckets) and FIRE (32 hidden units);
* the ``"xla"`` kernel (plain ``jnp``) with ALiBi;
* on a GPU, ``jax.nn.dot_product_attention(implementation="cudnn")`` without a
  bias and with the dense ``[1, N, L, L]`` ALiBi bias (formed in the same program,
  as a user of that API forms it); on a TPU, splash attention (no bias: it takes
  none).

Each figure is the median of ``--repeats`` runs after one compile; a case that fails
(out of memory, a missing backend) prints its error and the run goes on. Also
printed: each forward's compiled temporary memory (``memory_analysis``), and the
ratios the issue sets targets for: ALiBi / T5 / FIRE over no bias (target within
1.15), dense-bias cuDNN over in-kernel ALiBi at 16k (target at least 3), no-bias
kernel over cuDNN or splash (target within 1.5). ``--time-limit`` stops starting new cases
once spent (the device session is short).

Run on a device: ``python benchmarks/attention_kernel_benchmark.py --json out.json``
(``benchmarks/device_check.sh`` does). ``--smoke``: tiny shapes with the interpreted
GPU kernel, so that CI checks the script runs on CPU; its times mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import flax_posenc as fp

KERNELS = {"gpu": "pallas_gpu", "tpu": "pallas_tpu"}


def biases(heads: int) -> dict:
    rng = np.random.default_rng(0)
    normal = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)
    fire = fp.FireParams(
        jnp.float32(0.1), jnp.ones(heads), normal(32), normal(32), normal(32, heads),
        normal(heads),
    )  # fmt: skip
    return {
        "none": None,
        "alibi": fp.AlibiBias(heads),
        "t5": fp.RelativeBias(normal(32, heads), bidirectional=False),
        "fire": fp.FireBias(fire),
    }


def cases(kernel: str, heads: int, length: int, backend: str) -> dict:
    """name: a function of (q, k, v) to time."""
    positions = jnp.arange(length)

    def ours(implementation: str, bias) -> object:
        return lambda q, k, v: fp.blockwise_attention(
            q, k, v, q_positions=positions, bias=bias, causal=True,
            implementation=implementation,
        )  # fmt: skip

    out = {f"{kernel} {name}": ours(kernel, b) for name, b in biases(heads).items()}
    out["xla alibi"] = ours("xla", fp.AlibiBias(heads))
    if backend == "gpu":
        out["cudnn none"] = lambda q, k, v: jax.nn.dot_product_attention(
            q, k, v, is_causal=True, implementation="cudnn"
        )

        def dense(q, k, v):
            bias = fp.alibi_bias(positions, positions, heads)[None].astype(q.dtype)
            return jax.nn.dot_product_attention(
                q, k, v, bias=bias, is_causal=True, implementation="cudnn"
            )

        out["cudnn dense alibi"] = dense
    if backend == "tpu":
        out["splash none"] = splash(heads, length)
    return out


def splash(heads: int, length: int):
    """TPU splash attention, causal, no bias (it takes none), ``[B, L, N, H]`` in
    and out like ours."""
    from jax.experimental.pallas.ops.tpu import splash_attention as sa

    mask = sa.MultiHeadMask([sa.CausalMask((length, length))] * heads)
    kernel = sa.make_splash_mha(mask, head_shards=1, q_seq_shards=1)

    def attend(q, k, v):
        scale = q.shape[-1] ** -0.5
        heads_first = lambda x: jnp.swapaxes(x, 1, 2)  # [B, N, L, H]
        out = jax.vmap(kernel)(heads_first(q * scale), heads_first(k), heads_first(v))
        return jnp.swapaxes(out, 1, 2)

    return attend


def timed(function, args: tuple, repeats: int) -> float:
    jax.block_until_ready(function(*args))  # compile
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(function(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(attend, args: tuple, repeats: int) -> dict:
    forward = jax.jit(attend)
    loss = lambda q, k, v: attend(q, k, v).astype(jnp.float32).sum()
    gradient = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
    memory = forward.lower(*args).compile().memory_analysis()
    return {
        "forward_ms": 1e3 * timed(forward, args, repeats),
        "gradient_ms": 1e3 * timed(gradient, args, repeats),
        "temp_mib": None if memory is None else memory.temp_size_in_bytes / 2**20,
    }


def ratios(rows: dict, kernel: str) -> dict:
    out = {}
    for length, row in rows.items():
        get = lambda name, key, row=row: (row.get(name) or {}).get(key)
        pairs = {
            f"{b}/none": (f"{kernel} {b}", f"{kernel} none")
            for b in ("alibi", "t5", "fire")
        }
        pairs["dense/alibi"] = ("cudnn dense alibi", f"{kernel} alibi")
        pairs["none/cudnn"] = (f"{kernel} none", "cudnn none")
        pairs["none/splash"] = (f"{kernel} none", "splash none")
        for label, (a, b) in pairs.items():
            for key in ("forward_ms", "gradient_ms"):
                if get(a, key) and get(b, key):
                    out[f"L={length} {label} {key[:-3]}"] = get(a, key) / get(b, key)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="4096,16384,32768")
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--time-limit", type=float, default=240.0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    backend = jax.default_backend()
    kernel = KERNELS.get(backend, "pallas_gpu_interpret")
    lengths = [int(n) for n in args.lengths.split(",")]
    heads, head_dim, repeats = args.heads, args.head_dim, args.repeats
    if args.smoke:
        lengths, heads, head_dim, repeats = [128], 2, 32, 1
    print(
        f"backend={backend} devices={jax.devices()} jax={jax.__version__} "
        f"load_average={os.getloadavg()[0]:.2f} kernel={kernel} heads={heads} "
        f"head_dim={head_dim} repeats={repeats}"
    )
    start, rows = time.perf_counter(), {}
    for length in lengths:
        keys = jax.random.split(jax.random.key(0), 3)
        shape = (1, length, heads, head_dim)
        qkv = tuple(jax.random.normal(key, shape, jnp.bfloat16) for key in keys)
        rows[length] = {}
        for name, attend in cases(kernel, heads, length, backend).items():
            if time.perf_counter() - start > args.time_limit:
                print(f"L={length} {name}: not run (time limit)")
                continue
            try:
                rows[length][name] = figures = measure(attend, qkv, repeats)
            except Exception as error:  # an out-of-memory or a missing backend
                rows[length][name] = None
                print(
                    f"L={length} {name}: failed: {type(error).__name__}: {error}"[:300]
                )
                continue
            temp = figures["temp_mib"]
            print(
                f"L={length:6d} {name:28s} forward {figures['forward_ms']:9.2f} ms  "
                f"with gradient {figures['gradient_ms']:9.2f} ms  "
                f"temp {'?' if temp is None else f'{temp:.1f}'} MiB"
            )
    summary = ratios(rows, kernel)
    for label, value in summary.items():
        print(f"{label}: {value:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "ratios": summary}, f, indent=1)


if __name__ == "__main__":
    main()
