"""Speed and memory of ``apply_rope`` against a copy floor and a naive rotate_half.

In one process, for q ``[B, L, N, H]`` in float32 and bfloat16, times (compile apart
from steady state, ``block_until_ready``, round-robin repeats, median):

* ``floor``: ``q * 2`` under ``jit``, one read and one write of q: the memory-bound
  floor that any elementwise RoPE is measured against;
* ``apply_rope [B,L]`` / ``apply_rope [L]``: cos/sin formed from int positions inside
  ``jit`` (``[B, L]``, and ``[L]`` broadcast over the batch);
* ``cos/sin [B,L]``: ``rope_cos_sin`` alone, the table part of ``apply_rope [B,L]``;
* ``naive``: Hugging Face's torch ``apply_rotary_pos_emb`` translated to jnp
  (full-width ``cat(freqs, freqs)`` tables cast to q's dtype, ``rotate_half`` by
  ``concatenate``), positions ``[B, L]``;
* ``exact [L]``: ``apply_rope`` with ``angle_precision="exact"`` (angles reduced in
  fixed point, issue #12), positions ``[L]``, against ``apply_rope [L]``;
* ``pair swap``: q with each feature pair ``(2j, 2j + 1)`` swapped, no arithmetic:
  what XLA alone spends on the neighbour reads of the interleaved layout.

It prints the ratios apply_rope / floor and naive / apply_rope, each program's compiled
temp memory (``memory_analysis().temp_size_in_bytes``), and from the optimized HLO how
many top-level ops write a full q-sized array and where sin/cos are evaluated. A last
'long context' line times q ``[1, 32768, 32, 128]`` bfloat16 and reports the achieved
bandwidth (q read + written, tables not counted) and, on a device whose peak is known
or given by ``--peak-gbps``, the fraction of it. A 'blockwise' section times causal
ALiBi attention through ``blockwise_attention`` against XLA's dense attention with the
materialised bias (forward and grad, ratios printed) and reports the blockwise temp
memory at ``L = S = 32768`` (compiled, not run).

Run: ``python benchmarks/rope_benchmark.py`` (``--quick`` for small shapes, for CI;
``--json out.json`` to save the figures; ``--vector-width 512`` compiles every
program with 512-bit vectors, for AVX-512 CPUs). On CPU, glibc's allocator
page-faults on every fresh large output, which hides compute; see
``benchmarks/README.md`` for the jemalloc run the targets refer to.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import flax_posenc as fp

# Peak memory bandwidth (GB/s) of a few devices, by jax's ``device_kind``.
PEAK_GBPS = {
    "NVIDIA H200": 4800.0,
    "NVIDIA H100 80GB HBM3": 3350.0,
    "NVIDIA A100-SXM4-80GB": 2039.0,
    "NVIDIA A100-SXM4-40GB": 1555.0,
    "TPU v4": 1200.0,
    "TPU v5 lite": 819.0,
    "TPU v5p": 2765.0,
    "TPU v6 lite": 1640.0,
}
# Issue #11 targets: apply_rope / floor for positions [L] and [B, L].
TARGET_RATIO = {
    ("float32", "apply_rope [L]"): 1.10,
    ("bfloat16", "apply_rope [L]"): 1.40,
    ("float32", "apply_rope [B,L]"): 1.20,
    ("bfloat16", "apply_rope [B,L]"): 1.60,
}
TARGET_LAYOUT = 1.15  # interleaved / half, same dtype, positions [L]
TARGET_PARTIAL = 1.2  # partial rotary R = H/4 (half) / full rotary
TARGET_LONG_FRACTION = 0.75  # long context GB/s / floor GB/s
TARGET_WRITE = 2.0  # sinusoidal and T5 bias / write floor
TARGET_EXACT = 1.5  # issue #12: exact angles / float32 angles, apply_rope [L], f32
# XLA's sin/cos, or the CPU polynomial of flax_posenc._core.cpu (its range reduction,
# or the fixed-point reduction of exact angles: its shifts). A q-sized op whose only
# such op is a shift is the bfloat16 rounding of flax_posenc._core.cpu, not sin/cos.
TRIG_OPS = ("sine", "cosine", "round-nearest-even")
SHIFT_OPS = ("shift-right-logical",)
TRIVIAL_OPS = {"parameter", "constant", "bitcast", "tuple", "get-tuple-element"}


def naive_rope(q: jax.Array, positions: jax.Array, inv_freq: jax.Array) -> jax.Array:
    """Hugging Face's ``apply_rotary_pos_emb`` with ``rotate_half``, in jnp."""
    freqs = positions.astype(jnp.float32)[..., None] * inv_freq[None, None, :]
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    cos = jnp.cos(emb).astype(q.dtype)[:, :, None, :]
    sin = jnp.sin(emb).astype(q.dtype)[:, :, None, :]
    half = q.shape[-1] // 2
    rotated = jnp.concatenate([-q[..., half:], q[..., :half]], axis=-1)
    return q * cos + rotated * sin


INSTRUCTION = re.compile(r"^  (?:ROOT )?%\S+ = (\([^)]*\)|\S+) ([a-z\-]+)\(")


def swap_pairs(q: jax.Array) -> jax.Array:
    """``out[2j] = q[2j + 1]``, ``out[2j + 1] = q[2j]``: no arithmetic, only the
    neighbour reads an interleaved rotation needs (XLA:CPU's own cost of them)."""
    view = q.reshape(q.shape[:-1] + (q.shape[-1] // 2, 2))
    return jax.lax.rev(view, (view.ndim - 1,)).reshape(q.shape)


def hlo_summary(hlo: str, q_size: int) -> dict[str, Any]:
    """Top-level ops writing >= q_size elements, and the sizes where sin/cos run."""
    computations: dict[str, list[tuple[str, str, str]]] = {}
    name = ""
    for line in hlo.splitlines():
        header = re.match(r"^(ENTRY )?%(\S+) .*\{$", line)
        instruction = INSTRUCTION.match(line)
        if header:
            name = "ENTRY" if header.group(1) else header.group(2)
            computations[name] = []
        elif name and instruction:
            computations[name].append((*instruction.groups(), line))
    has_trig = {
        comp: any(op in TRIG_OPS for _, op, _ in ops)
        for comp, ops in computations.items()
    }
    has_shift = {
        comp: any(op in SHIFT_OPS for _, op, _ in ops)
        for comp, ops in computations.items()
    }
    full_q_ops, trig_sizes = [], set()
    for result_type, op, line in computations.get("ENTRY", []):
        if op in TRIVIAL_OPS:
            continue
        size = max(
            (
                int(np.prod([int(d) for d in dims.split(",") if d]))
                for dims in re.findall(r"\[([\d,]*)\]", result_type)
            ),
            default=0,
        )
        if size >= q_size:
            full_q_ops.append(op)
        called = re.findall(r"(?:calls|to_apply)=%([\w.\-]+)", line)
        trig = op in TRIG_OPS or any(has_trig.get(c, False) for c in called)
        shift = op in SHIFT_OPS or any(has_shift.get(c, False) for c in called)
        if trig or (shift and size < q_size):
            trig_sizes.add(size)
    return {"full_q_ops": full_q_ops, "trig_output_sizes": sorted(trig_sizes)}


def measure(
    fns: dict[str, Callable],
    args: dict[str, tuple],
    repeats: int,
    options: dict[str, Any],
) -> dict[str, dict[str, Any]]:
    """Compiles each function (timed) with the XLA compiler ``options``, then times
    them round-robin; medians in ms."""
    results: dict[str, dict[str, Any]] = {}
    compiled = {}
    for name, fn in fns.items():
        start = time.perf_counter()
        compiled[name] = jax.jit(fn).lower(*args[name]).compile(options)
        compile_s = time.perf_counter() - start
        jax.block_until_ready(compiled[name](*args[name]))  # warm-up
        memory = compiled[name].memory_analysis()
        temp = getattr(memory, "temp_size_in_bytes", None) if memory else None
        results[name] = {"compile_s": compile_s, "temp_bytes": temp, "times": []}
        results[name]["hlo_text"] = compiled[name].as_text()
    for _ in range(repeats):
        for name, call in compiled.items():
            start = time.perf_counter()
            jax.block_until_ready(call(*args[name]))
            results[name]["times"].append(time.perf_counter() - start)
    for entry in results.values():
        entry["median_ms"] = 1e3 * statistics.median(entry["times"])
        entry["min_ms"] = 1e3 * min(entry["times"])
        del entry["times"]
    return results


def bench_dtype(
    shape: tuple[int, ...], dtype: Any, repeats: int, options: dict[str, Any]
) -> dict[str, Any]:
    batch, length, _, head_dim = shape
    config = fp.RopeConfig(head_dim=head_dim)
    inv_freq = fp.rope_frequencies(config).inv_freq
    q = jax.random.normal(jax.random.key(0), shape, jnp.float32).astype(dtype)
    pos_bl = jnp.tile(jnp.arange(length, dtype=jnp.int32)[None, :], (batch, 1))
    pos_l = jnp.arange(length, dtype=jnp.int32)
    variants = {
        "interleaved [L]": fp.RopeConfig(head_dim=head_dim, layout="interleaved"),
        "partial R=H/4 [L]": fp.RopeConfig(head_dim=head_dim, rotary_dim=head_dim // 4),
        "partial interl. [L]": fp.RopeConfig(
            head_dim=head_dim, rotary_dim=head_dim // 4, layout="interleaved"
        ),
        "exact [L]": fp.RopeConfig(head_dim=head_dim, angle_precision="exact"),
    }
    fns = {
        "floor": lambda q: q * jnp.asarray(2, q.dtype),
        "apply_rope [B,L]": lambda q, p: fp.apply_rope(q, p, config),
        "apply_rope [L]": lambda q, p: fp.apply_rope(q, p, config),
        "cos/sin [B,L]": lambda p: fp.rope_cos_sin(p, config),
        "naive [B,L]": lambda q, p: naive_rope(q, p, inv_freq),
        "pair swap": swap_pairs,
    }
    args = {
        "floor": (q,),
        "apply_rope [B,L]": (q, pos_bl),
        "apply_rope [L]": (q, pos_l),
        "cos/sin [B,L]": (pos_bl,),
        "naive [B,L]": (q, pos_bl),
        "pair swap": (q,),
    }
    for name, variant in variants.items():
        fns[name] = lambda q, p, c=variant: fp.apply_rope(q, p, c)
        args[name] = (q, pos_l)
    results = measure(fns, args, repeats, options)
    for entry in results.values():
        entry["hlo"] = hlo_summary(entry.pop("hlo_text"), q.size)
    ours = jax.jit(fns["apply_rope [B,L]"])(q, pos_bl)
    naive = jax.jit(fns["naive [B,L]"])(q, pos_bl)
    tol = 1e-4 if dtype == jnp.float32 else 0.1  # naive rounds its tables to bf16
    np.testing.assert_allclose(
        np.asarray(ours, np.float32), np.asarray(naive, np.float32), atol=tol, rtol=tol
    )
    return {
        "dtype": jnp.dtype(dtype).name,
        "shape": list(shape),
        # one float32 cos/sin pair of width H, at the positions' shape
        "table_pair_bytes": {
            "apply_rope [B,L]": 2 * batch * length * head_dim * 4,
            "apply_rope [L]": 2 * length * head_dim * 4,
        },
        "results": results,
    }


def bench_long_context(
    shape: tuple[int, ...],
    repeats: int,
    peak_gbps: float | None,
    options: dict[str, Any],
) -> dict[str, Any]:
    config = fp.RopeConfig(head_dim=shape[-1])
    q = jax.random.normal(jax.random.key(0), shape, jnp.float32).astype(jnp.bfloat16)
    positions = jnp.arange(shape[1], dtype=jnp.int32)[None, :]
    fns = {
        "floor": lambda q: q * jnp.asarray(2, q.dtype),
        "apply_rope": lambda q, p: fp.apply_rope(q, p, config),
    }
    results = measure(
        fns, {"floor": (q,), "apply_rope": (q, positions)}, repeats, options
    )
    moved = 2 * q.nbytes
    out: dict[str, Any] = {"shape": list(shape), "dtype": "bfloat16", "bytes": moved}
    for entry in results.values():
        del entry["hlo_text"]
        entry["gbps"] = moved / (entry["median_ms"] * 1e-3) / 1e9
        if peak_gbps:
            entry["fraction_of_peak"] = entry["gbps"] / peak_gbps
    out["results"] = results
    out["peak_gbps"] = peak_gbps
    return out


def numpy_sinusoidal(positions: np.ndarray, dim: int, layout: str) -> np.ndarray:
    """numpy float32 sin/cos (SIMD) of the same angles, laid out: the CPU peer."""
    angles = positions.astype(np.float32)[..., None] * fp.sinusoidal_inv_freq(dim)
    sin, cos = np.sin(angles), np.cos(angles)
    if layout == "half":
        return np.concatenate([sin, cos], -1)
    return np.stack([sin, cos], -1).reshape(positions.shape + (dim,))


def time_numpy(fn: Callable[[], Any], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def bench_sinusoidal(
    batch: int,
    length: int,
    dim: int,
    table_len: int,
    repeats: int,
    options: dict[str, Any],
) -> dict[str, Any]:
    """sinusoidal_encoding of runtime positions and sinusoidal_table, vs a write floor.

    The write floor writes the float32 output once from the positions (a broadcast
    multiply); numpy is float32 ``np.sin``/``np.cos`` of the same angles.
    """
    positions = jnp.tile(jnp.arange(length, dtype=jnp.int32)[None], (batch, 1))
    table_positions = jnp.arange(table_len, dtype=jnp.int32)
    ones = jnp.ones((dim,), jnp.float32)
    fns: dict[str, Callable] = {
        "write floor [B,L]": lambda p: p[..., None].astype(jnp.float32) * ones,
        "write floor table": lambda p: p[..., None].astype(jnp.float32) * ones,
    }
    args: dict[str, tuple] = {
        "write floor [B,L]": (positions,),
        "write floor table": (table_positions,),
    }
    for layout in ("interleaved", "half"):
        fns[f"encoding {layout}"] = lambda p, lay=layout: fp.sinusoidal_encoding(
            p, dim, layout=lay
        )
        args[f"encoding {layout}"] = (positions,)
        fns[f"table {layout}"] = lambda lay=layout: fp.sinusoidal_table(
            table_len, dim, layout=lay
        )
        args[f"table {layout}"] = ()
    results = measure(fns, args, repeats, options)
    for entry in results.values():
        del entry["hlo_text"]
    numpy_ms = {}
    pos_np, tab_np = np.asarray(positions), np.arange(table_len)
    for layout in ("interleaved", "half"):
        numpy_ms[f"encoding {layout}"] = time_numpy(
            lambda lay=layout: numpy_sinusoidal(pos_np, dim, lay), repeats
        )
        numpy_ms[f"table {layout}"] = time_numpy(
            lambda lay=layout: numpy_sinusoidal(tab_np, dim, lay), repeats
        )
        np.testing.assert_allclose(
            np.asarray(jax.jit(fns[f"encoding {layout}"])(positions)),
            numpy_sinusoidal(pos_np, dim, layout),
            atol=2e-3,
        )
    return {
        "shape": [batch, length, dim],
        "table": [table_len, dim],
        "results": results,
        "numpy_ms": numpy_ms,
    }


def bench_t5(
    heads: int, length: int, repeats: int, options: dict[str, Any]
) -> dict[str, Any]:
    """relative_position_bias ``[N, L, L]`` vs a write floor of the same float32 size."""
    table = jax.random.normal(jax.random.key(0), (32, heads), jnp.float32)
    positions = jnp.arange(length, dtype=jnp.int32)
    fns = {
        "write floor": lambda t, q, k: (
            (k[None, None, :] - q[None, :, None]).astype(jnp.float32)
            * t[0][:, None, None]
        ),
        "relative_position_bias": lambda t, q, k: fp.relative_position_bias(t, q, k),
    }
    args = {name: (table, positions, positions) for name in fns}
    results = measure(fns, args, repeats, options)
    for entry in results.values():
        del entry["hlo_text"]
    return {"shape": [heads, length, length], "results": results}


def blockwise_alibi(heads: int) -> Callable:
    """Causal ALiBi attention, bias per tile: ``blockwise_attention``."""

    def attend(q, k, v, positions):
        return fp.blockwise_attention(
            q, k, v, q_positions=positions, bias=fp.AlibiBias(heads), causal=True
        )

    return attend


def dense_alibi(heads: int) -> Callable:
    """Causal ALiBi attention with the ``[N, L, S]`` bias: XLA's dense attention."""

    def attend(q, k, v, positions):
        bias = fp.alibi_bias(positions, positions, heads)[None]
        return jax.nn.dot_product_attention(q, k, v, bias=bias, is_causal=True)

    return attend


def grad_of(fn: Callable) -> Callable:
    """The gradient of ``sum(fn(q, k, v, positions) ** 2)`` in q, k and v."""
    return jax.grad(lambda *a: jnp.sum(fn(*a) ** 2), argnums=(0, 1, 2))


def bench_blockwise(
    batch: int,
    heads: int,
    length: int,
    head_dim: int,
    repeats: int,
    options: dict[str, Any],
) -> dict[str, Any]:
    """Causal ALiBi attention: ``blockwise_attention`` vs dense with the bias array.

    Dense is ``jax.nn.dot_product_attention`` (XLA) with ``alibi_bias`` materialised
    and ``is_causal=True``; forward and ``grad`` are timed. Also compiles (no run)
    the blockwise forward and grad at ``L = S = 32768``, 16 heads, H = 64, for their
    temp memory next to the 64 GiB of the dense float32 bias.
    """
    keys = jax.random.split(jax.random.key(0), 3)
    q, k, v = (jax.random.normal(key, (batch, length, heads, head_dim)) for key in keys)
    positions = jnp.arange(length, dtype=jnp.int32)
    dense, blockwise = dense_alibi(heads), blockwise_alibi(heads)
    fns = {
        "dense": dense,
        "blockwise": blockwise,
        "dense grad": grad_of(dense),
        "blockwise grad": grad_of(blockwise),
    }
    results = measure(
        fns, {name: (q, k, v, positions) for name in fns}, repeats, options
    )
    for entry in results.values():
        del entry["hlo_text"]
    np.testing.assert_allclose(
        jax.jit(blockwise)(q, k, v, positions),
        jax.jit(dense)(q, k, v, positions),
        atol=2e-5,
        rtol=2e-5,
    )
    long, long_heads = 32768, 16
    x = jax.ShapeDtypeStruct((1, long, long_heads, 64), jnp.float32)
    long_positions = jax.ShapeDtypeStruct((long,), jnp.int32)
    long_temp = {}
    for name, fn in (
        ("forward", blockwise_alibi(long_heads)),
        ("grad", grad_of(blockwise_alibi(long_heads))),
    ):
        compiled = jax.jit(fn).lower(x, x, x, long_positions).compile(options)
        memory = compiled.memory_analysis()
        long_temp[name] = (
            getattr(memory, "temp_size_in_bytes", None) if memory else None
        )
    return {
        "shape": [batch, length, heads, head_dim],
        "results": results,
        "long_shape": [1, long, long_heads, 64],
        "long_temp_bytes": long_temp,
        "long_dense_bias_bytes": long_heads * long * long * 4,
    }


def print_blockwise(case: dict[str, Any]) -> None:
    res = case["results"]
    print(f"\nblockwise vs dense causal ALiBi attention, q/k/v {case['shape']} float32")
    for name, entry in res.items():
        print(
            f"  {name:<16} compile {entry['compile_s']:.2f} s, median "
            f"{entry['median_ms']:.2f} ms, temp {mib(entry['temp_bytes'])} MiB"
        )
    for what in ("", " grad"):
        ratio = res[f"dense{what}"]["median_ms"] / res[f"blockwise{what}"]["median_ms"]
        print(f"  dense{what} / blockwise{what} = {ratio:.2f}")
    dense_bias = case["long_dense_bias_bytes"]
    for name, temp in case["long_temp_bytes"].items():
        fraction = "?" if temp is None else f"1/{dense_bias / temp:.0f}"
        print(
            f"  at {case['long_shape']}: blockwise {name} temp {mib(temp)} MiB = "
            f"{fraction} of the dense float32 bias ({dense_bias / 2**30:.0f} GiB)"
        )


def targets(
    cases: list[dict[str, Any]],
    long: dict[str, Any],
    sinusoidal: dict[str, Any],
    t5: dict[str, Any],
) -> list[tuple[str, float, str, bool]]:
    """(what, figure, target, met) for every issue #11 target, and issue #12's."""
    rows = []
    for case in cases:
        res, dtype = case["results"], case["dtype"]
        floor = res["floor"]["median_ms"]
        for name in ("apply_rope [L]", "apply_rope [B,L]"):
            ratio = res[name]["median_ms"] / floor
            bound = TARGET_RATIO[(dtype, name)]
            rows.append(
                (f"{name} {dtype} / floor", ratio, f"<= {bound}", ratio <= bound)
            )
        full = res["apply_rope [L]"]["median_ms"]
        ratio = res["interleaved [L]"]["median_ms"] / full
        rows.append(
            (
                f"interleaved / half {dtype}",
                ratio,
                f"<= {TARGET_LAYOUT}",
                ratio <= TARGET_LAYOUT,
            )
        )
        ratio = res["partial R=H/4 [L]"]["median_ms"] / full
        rows.append(
            (
                f"partial R=H/4 / full {dtype}",
                ratio,
                f"<= {TARGET_PARTIAL}",
                ratio <= TARGET_PARTIAL,
            )
        )
        if dtype == "float32":
            ratio = res["exact [L]"]["median_ms"] / full
            rows.append(
                (
                    "exact angles / float32 angles, apply_rope [L] float32",
                    ratio,
                    f"<= {TARGET_EXACT}",
                    ratio <= TARGET_EXACT,
                )
            )
    lres = long["results"]
    fraction = lres["apply_rope"]["gbps"] / lres["floor"]["gbps"]
    rows.append(
        (
            "long context bf16 GB/s / floor's",
            fraction,
            f">= {TARGET_LONG_FRACTION}",
            fraction >= TARGET_LONG_FRACTION,
        )
    )
    sres = sinusoidal["results"]
    for name in (
        "encoding interleaved",
        "encoding half",
        "table interleaved",
        "table half",
    ):
        floor_name = (
            "write floor [B,L]" if name.startswith("encoding") else "write floor table"
        )
        ms = sres[name]["median_ms"]
        ratio = ms / sres[floor_name]["median_ms"]
        faster = ms < sinusoidal["numpy_ms"][name]
        rows.append(
            (
                f"sinusoidal {name} / write floor (numpy {sinusoidal['numpy_ms'][name]:.2f} ms)",
                ratio,
                f"<= {TARGET_WRITE}, < numpy",
                ratio <= TARGET_WRITE and faster,
            )
        )
    tres = t5["results"]
    ratio = (
        tres["relative_position_bias"]["median_ms"] / tres["write floor"]["median_ms"]
    )
    rows.append(
        (
            "T5 relative_position_bias / write floor",
            ratio,
            f"<= {TARGET_WRITE}",
            ratio <= TARGET_WRITE,
        )
    )
    return rows


def print_simple(title: str, case: dict[str, Any]) -> None:
    print(f"\n{title}")
    for name, entry in case["results"].items():
        print(
            f"  {name:<24} compile {entry['compile_s']:.2f} s, median "
            f"{entry['median_ms']:.2f} ms, min {entry['min_ms']:.2f} ms"
        )
    for name, ms in case.get("numpy_ms", {}).items():
        print(f"  numpy float32 {name:<16} median {ms:.2f} ms")


def mib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**20:.2f}"


def print_case(case: dict[str, Any]) -> None:
    res = case["results"]
    floor = res["floor"]["median_ms"]
    print(f"\nq {case['shape']} {case['dtype']}")
    header = (
        f"{'program':<18}{'compile s':>10}{'median ms':>11}{'min ms':>9}"
        f"{'/ floor':>9}{'temp MiB':>10}  full-q ops; sin/cos output sizes"
    )
    print(header)
    print("-" * len(header))
    for name, entry in res.items():
        hlo = entry["hlo"]
        ops = ",".join(hlo["full_q_ops"]) or "-"
        trig = ",".join(str(s) for s in hlo["trig_output_sizes"]) or "-"
        print(
            f"{name:<18}{entry['compile_s']:>10.2f}{entry['median_ms']:>11.2f}"
            f"{entry['min_ms']:>9.2f}{entry['median_ms'] / floor:>9.2f}"
            f"{mib(entry['temp_bytes']):>10}  {ops}; {trig}"
        )
    ours = res["apply_rope [B,L]"]["median_ms"]
    rotation = ours - res["cos/sin [B,L]"]["median_ms"]
    print(
        f"naive / apply_rope [B,L] = {res['naive [B,L]']['median_ms'] / ours:.2f}; "
        f"apply_rope [B,L] less its cos/sin tables = {rotation:.2f} ms "
        f"= {rotation / floor:.2f} x floor"
    )
    for name, bound in case["table_pair_bytes"].items():
        temp = res[name]["temp_bytes"]
        temp_met = temp is not None and temp <= bound
        print(
            f"temp {name}: {mib(temp)} MiB <= float32 cos/sin pair of width H "
            f"{mib(bound)} MiB {'met' if temp_met else 'NOT met'}"
        )


def print_long(case: dict[str, Any]) -> None:
    print(
        f"\nlong context: q {case['shape']} bfloat16, {case['bytes'] / 1e9:.2f} GB moved"
    )
    for name, entry in case["results"].items():
        line = (
            f"  {name:<12} compile {entry['compile_s']:.2f} s, median "
            f"{entry['median_ms']:.2f} ms, {entry['gbps']:.1f} GB/s"
        )
        if "fraction_of_peak" in entry:
            line += (
                f" = {entry['fraction_of_peak']:.0%} of {case['peak_gbps']:.0f} GB/s"
            )
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, for CI")
    parser.add_argument("--repeats", type=int, help="timed calls per program")
    parser.add_argument("--json", type=str, help="write the figures to this path")
    parser.add_argument("--peak-gbps", type=float, help="device peak memory bandwidth")
    parser.add_argument(
        "--vector-width",
        type=int,
        choices=(256, 512),
        help="XLA:CPU's preferred vector width in bits for every program (the "
        "compiler option xla_cpu_prefer_vector_width; default: XLA's, 256)",
    )
    args = parser.parse_args()
    options: dict[str, Any] = {}
    if args.vector_width:
        options["xla_cpu_prefer_vector_width"] = args.vector_width
    if args.quick:
        shape, long_shape, repeats = (2, 256, 4, 128), (1, 2048, 8, 128), 5
        sin_sizes, t5_sizes = (2, 256, 256, 1024), (4, 256)
        blockwise_sizes = (1, 4, 512, 64)
    else:
        shape, long_shape, repeats = (4, 2048, 16, 128), (1, 32768, 32, 128), 15
        sin_sizes, t5_sizes = (4, 2048, 1024, 8192), (16, 1024)
        blockwise_sizes = (1, 8, 2048, 64)
    repeats = args.repeats or repeats
    device = jax.devices()[0]
    peak = args.peak_gbps or PEAK_GBPS.get(device.device_kind)
    env = {
        "device": f"{device.platform} {device.device_kind}",
        "jax": jax.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "loadavg_1min": os.getloadavg()[0],
        "LD_PRELOAD": os.environ.get("LD_PRELOAD", ""),
        "MALLOC_CONF": os.environ.get("MALLOC_CONF", ""),
        "XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),
        "compiler_options": options,
        "repeats": repeats,
    }
    print(" ".join(f"{k}={v}" for k, v in env.items()))
    cases = [
        bench_dtype(shape, dtype, repeats, options)
        for dtype in (jnp.float32, jnp.bfloat16)
    ]
    for case in cases:
        print_case(case)
    long = bench_long_context(long_shape, max(3, repeats // 3), peak, options)
    print_long(long)
    sinusoidal = bench_sinusoidal(*sin_sizes, repeats, options)
    print_simple(
        f"sinusoidal: encoding of positions {sin_sizes[:2]} x {sin_sizes[2]}, "
        f"table ({sin_sizes[3]}, {sin_sizes[2]})",
        sinusoidal,
    )
    t5 = bench_t5(*t5_sizes, repeats, options)
    print_simple(f"T5 relative_position_bias {t5['shape']}", t5)
    blockwise = bench_blockwise(*blockwise_sizes, max(3, repeats // 3), options)
    print_blockwise(blockwise)
    env["loadavg_1min_end"] = os.getloadavg()[0]
    rows = targets(cases, long, sinusoidal, t5)
    print(
        f"\ntargets (issues #11, #12), load average {env['loadavg_1min']:.2f} at start, "
        f"{env['loadavg_1min_end']:.2f} at end, LD_PRELOAD={env['LD_PRELOAD'] or '-'}, "
        f"vector width {args.vector_width or 'XLA default'}"
    )
    for what, figure, bound, met in rows:
        print(f"  {what:<62} {figure:6.2f}  {bound:<16} {'met' if met else 'NOT met'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "env": env,
                    "cases": cases,
                    "long_context": long,
                    "sinusoidal": sinusoidal,
                    "t5": t5,
                    "blockwise": blockwise,
                    "targets": rows,
                },
                f,
                indent=1,
            )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
