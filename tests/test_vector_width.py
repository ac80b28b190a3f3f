"""XLA:CPU's vector width changes the time, not the numbers.

The CPU guide recommends 512-bit vectors on AVX-512 machines
(``compiler_options={"xla_cpu_prefer_vector_width": 512}``). Each program here is
compiled at XLA's default width and at 512 bits, and the outputs must be the same
bits: a different FMA contraction or vector epilogue would show up here. On a CPU
without 512-bit vectors both compile to the same code, and the test passes trivially.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from cpu_vector_width import VECTOR_WIDTHS, run_at_width
from helpers import normal

import flax_posenc as fp

Q = normal((2, 64, 4, 128), seed=0)
POSITIONS = jnp.arange(64) * 37 + 5  # angles past a few turns


def _rope(**fields):
    config = fp.RopeConfig(head_dim=128, **fields)
    return lambda q, p: fp.apply_rope(q, p, config)


PROGRAMS = {
    **{
        f"apply_rope {jnp.dtype(dtype).name} {layout} R={rotary}": (
            _rope(rotary_dim=rotary, layout=layout),
            (Q.astype(dtype), POSITIONS),
        )
        for dtype in (jnp.float32, jnp.bfloat16)
        for layout in ("half", "interleaved")
        for rotary in (128, 32)
    },
    "apply_rope exact angles": (_rope(angle_precision="exact"), (Q, POSITIONS * 10**5)),
    **{
        f"sinusoidal_encoding {layout}": (
            lambda p, lay=layout: fp.sinusoidal_encoding(p, 256, layout=lay),
            (jnp.stack([POSITIONS, POSITIONS * 1000]),),
        )
        for layout in ("interleaved", "half")
    },
    "relative_position_bias": (
        fp.relative_position_bias,
        (Q[0, :32, 0, :8], POSITIONS, POSITIONS * 3),
    ),
}


# Two corners of the apply_rope grid by default (float32 half R=128, bfloat16
# interleaved R=32); the other six with `slow`.
SLOW = {
    name
    for name in PROGRAMS
    if name.startswith("apply_rope ")
    and name
    not in ("apply_rope float32 half R=128", "apply_rope bfloat16 interleaved R=32")
    and "exact" not in name
}


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in PROGRAMS],
)
def test_same_bits_at_512_bit_vectors(name):
    fn, args = PROGRAMS[name]
    default, wide = (run_at_width(fn, *args, vector_width=w) for w in VECTOR_WIDTHS)
    np.testing.assert_array_equal(
        np.asarray(default, np.float32), np.asarray(wide, np.float32)
    )
