"""Ring attention: bytes communicated (from the compiled HLO) and per-device memory.

For ``n = 1, 2, 4, 8`` host devices on a mesh axis ``"seq"``, causal ALiBi ring
attention (:func:`flax_posenc.sharded_ring_attention`) of q ``[1, L, N, H]`` with
grouped k/v ``[1, L, K, H]`` (``N = 8``, ``H = 64``, ``K = 2`` unless
``--kv-heads``), float32, for each ``kv_chunks`` of ``--kv-chunks`` (the K/V block
travels the ring in that many chunks; ``None``, the default, chooses them from the
shapes):

* **bytes communicated per layer**, per device, read from the compiled HLO: every
  ``collective-permute`` (sync or ``-start``) with its operand size, times the trip
  counts of the while loops around it (``known_trip_count``, propagated through the
  call graph). Theory: each device receives ``n - 1`` blocks of ``L / n`` keys, i.e.
  ``(n - 1) / n`` of the K/V bytes (k + v), plus their int32 positions; the gradient
  adds the K/V again and ``dk``/``dv`` (float32) ``n`` times. Printed with their
  ratio measured / theory. In the gradient XLA merges the backward's first permute
  of k/v (and positions) with the forward's identical one, so the measured bytes
  are one step's k/v/positions below this theory.
* **per-device compiled memory** (``memory_analysis()``: temp, arguments, output) of
  the forward and of the gradient against ``L``, and, beside it, single-device
  ``blockwise_attention`` at ``L / n`` (what one device would hold of the same work).
  Each row starts from empty caches (``jax.clear_caches()``): without that, what the
  process traced before changed the single-device gradient's memory (236 against
  107 MiB at ``L = 65536``, ``K = 2``).

Compile only: nothing is run, so host "devices" sharing two cores measure what the
program would move and hold, not time (wall times on host devices are not meaningful;
on GPUs the step time against single-device blockwise attention at the same
per-device length is the figure to add, see benchmarks/README.md).

Run: ``python benchmarks/ring_benchmark.py`` (``--quick``: smaller lengths, for CI;
``--json out.json`` to save the figures; ``--kv-heads 8 --kv-chunks 1,4,None
--lengths 65536``: multi-head K/V, whole blocks against chunks of a quarter and the
default).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count=8"

import jax
import jax.numpy as jnp
from jax.sharding import AxisType

import flax_posenc as fp

N, H = 8, 64
SIZES = (1, 2, 4, 8)
_COMPUTATION = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{\s*$")
_PERMUTE = re.compile(r"= (.+?) collective-permute(?:-start)?\(")
_SHAPE = re.compile(
    r"(pred|s8|u8|s16|u16|f16|bf16|s32|u32|f32|s64|u64|f64)\[([\d,]*)\]"
)
_CALLS = re.compile(
    r"(?:body|condition|to_apply|calls|true_computation|false_computation)=%?([\w.\-]+)"
)
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"')
_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2}
_BYTES |= {"s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8}


def shape_bytes(text: str) -> int:
    """Bytes of the first array shape in ``text`` (a permute's operand type)."""
    match = _SHAPE.search(text)
    if match is None:
        return 0
    dims = [int(d) for d in match.group(2).split(",") if d]
    count = 1
    for d in dims:
        count *= d
    return count * _BYTES[match.group(1)]


def permuted_bytes(hlo: str) -> tuple[int, int]:
    """(bytes, executions) of collective-permutes per device, loops unrolled."""
    computations: dict[str, list[str]] = {}
    entry, current = None, None
    for line in hlo.splitlines():
        match = _COMPUTATION.match(line)
        if match:
            current = match.group(1)
            computations[current] = []
            if line.startswith("ENTRY"):
                entry = current
        elif current is not None:
            computations[current].append(line)
    total, count = 0, 0
    stack = [(entry, 1)]
    while stack:
        name, times = stack.pop()
        for line in computations.get(name, []):
            permute = _PERMUTE.search(line)
            if permute:
                total += times * shape_bytes(permute.group(1))
                count += times
            trip = _TRIP.search(line)
            inner = times * (int(trip.group(1)) if trip and " while(" in line else 1)
            for callee in _CALLS.findall(line):
                is_body = f"body=%{callee}" in line or f"body={callee}" in line
                stack.append((callee, inner if is_body else times))
            for group in _BRANCHES.findall(line):
                for callee in group.split(","):
                    stack.append((callee.strip().lstrip("%"), times))
    return total, count


def programs(n: int, length: int, grad: bool, kv_heads: int, kv_chunks: int | None):
    """(ring on n devices, blockwise on one at L / n), jitted, with their inputs."""
    mesh = jax.make_mesh(
        (n,), ("seq",), axis_types=(AxisType.Auto,), devices=jax.devices()[:n]
    )

    def ring(q, k, v, positions):
        return fp.sharded_ring_attention(
            q, k, v, mesh=mesh, axis_name="seq", q_positions=positions,
            bias=fp.AlibiBias(N), causal=True, kv_chunks=kv_chunks,
        )  # fmt: skip

    def one(q, k, v, positions):
        return fp.blockwise_attention(
            q, k, v, q_positions=positions, bias=fp.AlibiBias(N), causal=True
        )

    def shapes(length):
        q = jax.ShapeDtypeStruct((1, length, N, H), jnp.float32)
        kv = jax.ShapeDtypeStruct((1, length, kv_heads, H), jnp.float32)
        return q, kv, kv, jax.ShapeDtypeStruct((length,), jnp.int32)

    if grad:
        ring = jax.grad(lambda *a, f=ring: f(*a).sum(), argnums=(0, 1, 2))
        one = jax.grad(lambda *a, f=one: f(*a).sum(), argnums=(0, 1, 2))
    return (jax.jit(ring), shapes(length)), (jax.jit(one), shapes(length // n))


def measure(
    n: int, length: int, grad: bool, kv_heads: int, kv_chunks: int | None
) -> dict:
    jax.clear_caches()  # each row compiled as in a fresh process
    programs_ = programs(n, length, grad, kv_heads, kv_chunks)
    (ring, ring_args), (one, one_args) = programs_
    start = time.perf_counter()
    compiled = ring.lower(*ring_args).compile()
    compile_s = time.perf_counter() - start
    sent, executions = permuted_bytes(compiled.as_text())
    kv_bytes = 2 * length * kv_heads * H * 4  # k and v, float32, all devices
    positions_bytes = length * 4
    theory = (n - 1) / n * (kv_bytes + positions_bytes)
    if grad and n > 1:  # k, v, positions again; dk, dv (float32) n times
        theory = 2 * theory + kv_bytes
    memory = compiled.memory_analysis()
    one_memory = one.lower(*one_args).compile().memory_analysis()
    return {
        "n": n,
        "L": length,
        "grad": grad,
        "kv_heads": kv_heads,
        "kv_chunks": kv_chunks,
        "permutes": executions,
        "sent_bytes": sent,
        "theory_bytes": theory,
        "kv_bytes_per_device": kv_bytes // n,
        "temp": memory.temp_size_in_bytes,
        "arguments": memory.argument_size_in_bytes,
        "output": memory.output_size_in_bytes,
        "one_device_temp_at_L_over_n": one_memory.temp_size_in_bytes,
        "compile_s": compile_s,
    }


def print_row(row: dict) -> None:
    mib, n = 2**20, row["n"]
    ratio = row["sent_bytes"] / row["theory_bytes"] if n > 1 else 1.0
    versus = row["temp"] / row["one_device_temp_at_L_over_n"]
    print(
        f"{'grad' if row['grad'] else 'forward':8} {n:2d} {row['L']:6d} "
        f"{row['kv_chunks']!s:>6} {row['permutes']:8d} {row['sent_bytes'] / mib:9.2f} "
        f"{row['theory_bytes'] / mib:8.2f} {ratio:6.3f} "
        f"{row['temp'] / mib:9.2f} {row['arguments'] / mib:6.1f} "
        f"{row['output'] / mib:6.1f} "
        f"{row['one_device_temp_at_L_over_n'] / mib:9.2f} {versus:5.2f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small lengths, for CI")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--kv-heads", type=int, default=2, help="K (N = 8)")
    parser.add_argument(
        "--kv-chunks",
        default="None",
        help="comma-separated kv_chunks values; None: chosen from the shapes",
    )
    parser.add_argument(
        "--lengths", help="comma-separated L (default 4096,16384,65536)"
    )
    args = parser.parse_args()
    lengths = (1024, 4096) if args.quick else (4096, 16384, 65536)
    if args.lengths:
        lengths = tuple(int(x) for x in args.lengths.split(","))
    chunk_counts = tuple(
        None if x == "None" else int(x) for x in args.kv_chunks.split(",")
    )
    kv_heads = args.kv_heads
    load = os.getloadavg()
    print(
        f"jax {jax.__version__}, {jax.device_count()} x {jax.devices()[0].platform}, "
        f"q [1, L, {N}, {H}], k/v [1, L, {kv_heads}, {H}] float32, causal ALiBi; "
        f"load average {load[0]:.2f}"
    )
    print(
        f"{'pass':8} {'n':>2} {'L':>6} {'chunks':>6} {'permutes':>8} {'sent MiB':>9} "
        f"{'theory':>8} {'ratio':>6} {'temp MiB':>9} {'args':>6} {'out':>6} "
        f"{'1 dev L/n':>9} {'x':>5}"
    )
    rows = []
    for grad in (False, True):
        for length in lengths:
            for n in SIZES:
                for chunks in chunk_counts if n > 1 else (None,):
                    row = measure(n, length, grad, kv_heads, chunks)
                    rows.append(row)
                    print_row(row)
    load = os.getloadavg()
    print(f"load average at the end {load[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
