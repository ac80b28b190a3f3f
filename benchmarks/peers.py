"""apply_rope against the RoPE of whichever peer libraries are installed.

Same shape as ``rope_benchmark.py`` (q ``[4, 2048, 16, 128]``, float32 and bfloat16,
positions ``arange(L)``), the same floor (``q * 2``), medians of interleaved rounds in
one process. Each peer is first checked against a float64 numpy truth in its own
layout (all the peers here use the ``half`` / rotate_half pairing); a peer that is not
installed, or fails to import, is skipped with the reason. Not part of CI; install
notes in ``benchmarks/README.md``.

Peers tried: gemma's ``apply_rope`` (``gemma/gm/math/_positional_embeddings.py``,
loaded by file so that gemma's heavy package imports are not needed), equinox's
``nn.RotaryPositionalEmbedding``, keras-hub's ``RotaryEmbedding`` (Keras 3 on the JAX
backend), maxtext's ``RotaryEmbedding`` and penzai's ``ApplyRoPE``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

import flax_posenc as fp

THETA = 10000.0


def truth_half(q: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """float64 rotate_half RoPE of float64(q)."""
    q = q.astype(np.float64)
    half = q.shape[-1] // 2
    inv_freq = THETA ** (-np.arange(half, dtype=np.float64) * 2 / q.shape[-1])
    angles = positions.astype(np.float64)[:, None] * inv_freq[None, :]
    cos, sin = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    a, b = q[..., :half], q[..., half:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], -1)


def gemma_peer() -> Callable:
    spec = importlib.util.find_spec("gemma")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("gemma is not installed")
    path = os.path.join(
        spec.submodule_search_locations[0], "gm", "math", "_positional_embeddings.py"
    )
    module_spec = importlib.util.spec_from_file_location("gemma_rope", path)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"no {path}")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)

    def rope(q, positions):
        positions = jnp.broadcast_to(positions[None], q.shape[:2])
        return module.apply_rope(q, positions, base_frequency=int(THETA))

    return rope


def equinox_peer() -> Callable:
    eqx = importlib.import_module("equinox")

    def rope(q, positions):
        del positions  # equinox rotates positions 0..L-1
        module = eqx.nn.RotaryPositionalEmbedding(q.shape[-1], theta=THETA)
        # [L, H] per (batch, head); tables in float32, output in q's dtype.
        per_head = jax.vmap(module, in_axes=1, out_axes=1)  # over N
        out = jax.vmap(per_head)(q.astype(jnp.float32))  # over B
        return out.astype(q.dtype)

    return rope


def keras_hub_peer() -> Callable:
    os.environ.setdefault("KERAS_BACKEND", "jax")
    layers = importlib.import_module("keras_hub.layers")
    layer = layers.RotaryEmbedding(max_wavelength=int(THETA), sequence_axis=1)

    def rope(q, positions):
        del positions  # keras-hub rotates positions start_index..start_index+L-1
        return layer(q)

    return rope


def maxtext_peer() -> Callable:
    embeddings = importlib.import_module("MaxText.layers.embeddings")

    def rope(q, positions):
        layer = embeddings.RotaryEmbedding(
            min_timescale=1, max_timescale=int(THETA), embedding_dims=q.shape[-1]
        )
        positions = jnp.broadcast_to(positions[None], q.shape[:2])
        return layer.apply({}, q, positions)

    return rope


def penzai_peer() -> Callable:
    pz = importlib.import_module("penzai.pz")
    nn = importlib.import_module("penzai.nn")

    def rope(q, positions):
        layer = nn.ApplyRoPE(
            positions_input_name="positions",
            embedding_axis="projection",
            max_wavelength=THETA,
        )
        named = pz.nx.wrap(q).tag("batch", "seq", "heads", "projection")
        pos = pz.nx.wrap(jnp.broadcast_to(positions[None], q.shape[:2])).tag(
            "batch", "seq"
        )
        out = layer(named, positions=pos)
        return out.untag("batch", "seq", "heads", "projection").unwrap()

    return rope


PEERS = {
    "gemma apply_rope": gemma_peer,
    "equinox RotaryPositionalEmbedding": equinox_peer,
    "keras-hub RotaryEmbedding": keras_hub_peer,
    "maxtext RotaryEmbedding": maxtext_peer,
    "penzai ApplyRoPE": penzai_peer,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    shape = (2, 256, 4, 128) if args.quick else (4, 2048, 16, 128)
    print(
        f"q {list(shape)}, jax {jax.__version__}, load {os.getloadavg()[0]:.2f}, "
        f"LD_PRELOAD={os.environ.get('LD_PRELOAD', '') or '-'}"
    )
    positions = jnp.arange(shape[1], dtype=jnp.int32)
    config = fp.RopeConfig(head_dim=shape[-1], theta=THETA)
    available: dict[str, Callable] = {}
    for name, make in PEERS.items():
        try:
            available[name] = make()
        except Exception as error:
            print(f"skip {name}: {type(error).__name__}: {error}")
    for dtype in (jnp.float32, jnp.bfloat16):
        q = jax.random.normal(jax.random.key(0), shape, jnp.float32).astype(dtype)
        want = truth_half(np.asarray(q, np.float32), np.asarray(positions))
        fns: dict[str, Callable] = {
            "floor": lambda q, p: q * jnp.asarray(2, q.dtype),
            "flax_posenc": lambda q, p: fp.apply_rope(q, p, config),
            **{n: f for n, f in available.items()},
        }
        compiled, errors = {}, {}
        for name, fn in fns.items():
            try:
                compiled[name] = jax.jit(fn).lower(q, positions).compile()
                out = np.asarray(compiled[name](q, positions), np.float64)
                if name != "floor":
                    errors[name] = float(np.max(np.abs(out - want)))
            except Exception as error:
                print(f"skip {name} ({jnp.dtype(dtype).name}): {error}")
                compiled.pop(name, None)
        times: dict[str, list[float]] = {name: [] for name in compiled}
        for _ in range(args.repeats):
            for name, call in compiled.items():
                start = time.perf_counter()
                jax.block_until_ready(call(q, positions))
                times[name].append(time.perf_counter() - start)
        floor = statistics.median(times["floor"])
        print(f"\n{jnp.dtype(dtype).name}: program, median ms, / floor, max |err|")
        for name, ts in times.items():
            median = statistics.median(ts)
            err = f"{errors[name]:.2e}" if name in errors else "-"
            if name in errors:  # float32 angle rounding, plus bf16 output rounding
                tol = 2e-3 if dtype == jnp.float32 else 5e-2
                err += " ok" if errors[name] <= tol else f" WRONG (> {tol})"
            print(f"  {name:<36} {1e3 * median:8.2f} {median / floor:7.2f}  {err}")
    print(f"load at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
