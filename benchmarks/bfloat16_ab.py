"""A/B of the bfloat16 RoPE rotation on CPU: ``astype`` converts against the bit
operations of ``flax_posenc._bfloat16`` (the same output bits), in one process.

Both programs are compiled first, then timed in interleaved rounds; medians in ms.
Run with jemalloc as ``benchmarks/README.md`` describes::

    python benchmarks/bfloat16_ab.py
"""

from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import flax_posenc as fp
from flax_posenc import _bfloat16
from flax_posenc import rope as rope_module

ROUNDS = 60
CASES = {  # name: (config, q shape, positions [B, L] rather than [L])
    "half [L]": (fp.RopeConfig(head_dim=128), (4, 2048, 16, 128), False),
    "half [B,L]": (fp.RopeConfig(head_dim=128), (4, 2048, 16, 128), True),
    "partial R=32 [L]": (
        fp.RopeConfig(head_dim=128, rotary_dim=32),
        (4, 2048, 16, 128),
        False,
    ),
    "long context [L]": (fp.RopeConfig(head_dim=128), (1, 32768, 32, 128), False),
}
CONVERTS = {
    "astype": (lambda x: x.astype(jnp.float32), lambda y, dtype: y.astype(dtype)),
    "bit ops": (_bfloat16.widen, _bfloat16.narrow),
}


def compiled(config, shape, batched, converts):
    """``apply_rope`` compiled with the rotation's converts replaced."""
    rope_module.widen, rope_module.narrow = converts
    q = jax.random.normal(jax.random.key(0), shape).astype(jnp.bfloat16)
    positions = jnp.arange(shape[1])
    if batched:
        positions = jnp.broadcast_to(positions, shape[:2])
    fn = jax.jit(lambda q, p: fp.apply_rope(q, p, config)).lower(q, positions)
    return fn.compile(), (q, positions)


def main() -> None:
    print(f"loadavg_1min={os.getloadavg()[0]:.2f}")
    for name, (config, shape, batched) in CASES.items():
        programs = {k: compiled(config, shape, batched, v) for k, v in CONVERTS.items()}
        outputs = [np.asarray(f(*args), np.float32) for f, args in programs.values()]
        np.testing.assert_array_equal(*outputs)  # the same bits
        times: dict[str, list[float]] = {k: [] for k in programs}
        for _ in range(ROUNDS):
            for key, (fn, args) in programs.items():
                start = time.perf_counter()
                fn(*args).block_until_ready()
                times[key].append(time.perf_counter() - start)
        a, b = (1e3 * np.median(times[k]) for k in CONVERTS)
        print(f"{name:18s} astype {a:6.2f} ms  bit ops {b:6.2f} ms  ratio {b / a:.2f}")
    rope_module.widen, rope_module.narrow = CONVERTS["bit ops"]


if __name__ == "__main__":
    main()
