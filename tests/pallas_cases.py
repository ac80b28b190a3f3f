"""What the Pallas kernel tests share: the biases with their float64 truths, the
inputs, the interpreted kernels' block sizes, the RoPE configs and the platforms
the kernels lower for (``tests/test_pallas_*.py``).

Truth: the float64 dense softmax of ``tests/test_blockwise.py`` with the float64
biases of ``tests/test_blockwise.py`` and ``tests/length_reference.py`` (the papers'
formulas), and the ``"xla"`` kernel. The kernels run in Pallas's interpreter on CPU
(``"pallas_*_interpret"``: the same kernel body, grid and index maps; the TPU
interpreter simulates the hardware's memories) and are lowered by ``jax.export`` for
TPU (Mosaic) and for CUDA (Triton), where no buffer of ``L * S`` elements may
appear. The interpreter is slow: a few cases run by default, the grids under
``slow``, one file per concept so that the test workers share them.

Tolerances: float32 ``4e-6`` against float64 (an online softmax over a few tiles;
the blockwise kernel's own bound), bfloat16 ``2e-2`` (inputs rounded to 8 bits of
mantissa, statistics in float32).
"""

from __future__ import annotations

import re

import jax
import length_reference as ref
import numpy as np
import rope_reference
from jax import export
from test_blockwise import alibi_reference, t5_reference

import flax_posenc as fp

RNG = np.random.default_rng(33)
HEADS, KV_HEADS = 8, 2
KERPLE = RNG.standard_normal((2, HEADS)).astype(np.float32)
FIRE = fp.FireParams(
    np.float32(0.1),
    RNG.standard_normal(HEADS).astype(np.float32),
    RNG.standard_normal(8).astype(np.float32),
    RNG.standard_normal(8).astype(np.float32),
    RNG.standard_normal((8, HEADS)).astype(np.float32),
    RNG.standard_normal(HEADS).astype(np.float32),
)
TABLE = RNG.standard_normal((32, HEADS)).astype(np.float32)


def kerple64(q_pos, k_pos, kernel):
    r1 = ref.softplus(KERPLE[0])
    r2 = ref.softplus(KERPLE[1]) if kernel == "log" else 2 * ref.sigmoid(KERPLE[1])
    return np.stack(
        [ref.kerple(q, k, r1, r2, kernel) for q, k in zip(q_pos, k_pos, strict=True)]
    )


def fire64(q_pos, k_pos):
    """Each head with its own threshold (threshold_multiplier is per head)."""
    c, t, w1, b1, w2, b2 = FIRE
    per_head = lambda q, k, h: ref.fire(q, k, c, abs(t[h] * 64.0), w1, b1, w2, b2)[h]
    return np.stack(
        [
            np.stack([per_head(q, k, h) for h in range(HEADS)])
            for q, k in zip(q_pos, k_pos, strict=True)
        ]
    )


# name: (the bias, its float64 [B, N, L, S] from [B, L], [B, S] positions)
BIASES = {
    "none": (None, lambda q, k: 0.0),
    "alibi": (fp.AlibiBias(HEADS), lambda q, k: alibi_reference(q, k, HEADS)),
    "t5": (fp.RelativeBias(TABLE), lambda q, k: t5_reference(TABLE, q, k)),
    "t5_causal": (
        fp.RelativeBias(TABLE, bidirectional=False),
        lambda q, k: t5_reference(TABLE, q, k, bidirectional=False),
    ),
    "kerple_log": (
        fp.KerpleBias(KERPLE[0], KERPLE[1]),
        lambda q, k: kerple64(q, k, "log"),
    ),
    "kerple_power": (
        fp.KerpleBias(KERPLE[0], KERPLE[1], kernel="power"),
        lambda q, k: kerple64(q, k, "power"),
    ),
    "fire": (fp.FireBias(FIRE, init_threshold=64.0), fire64),
}


def inputs(length, keys, dtype, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((2, length, HEADS, 128)).astype(np.float32)
    k, v = rng.standard_normal((2, 2, keys, KV_HEADS, 128)).astype(np.float32)
    return q.astype(dtype), k.astype(dtype), v.astype(dtype)


# each interpreted kernel with block sizes that leave several tiles and a ragged one
KERNELS = {
    "pallas_tpu_interpret": {"block_q": 32, "block_k": 128},
    "pallas_gpu_interpret": {"block_q": 16, "block_k": 32},
}


TENSOR = re.compile(r"tensor<((?:\d+x)+)")


# platform: (the kernel lowered for it, its custom call, export's checks to skip)
PLATFORMS = {
    "tpu": ("pallas_tpu", "tpu_custom_call", ()),
    # Triton's call has no compatibility guarantee: export refuses it unless told
    "cuda": (
        "pallas_gpu",
        "__gpu$xla.gpu.triton",
        (export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton"),),
    ),
}


# name: (a function of the bias's parameters, the parameters)
TRAINABLE = {
    "alibi": (lambda params: fp.AlibiBias(HEADS), np.zeros(1, np.float32)),
    "t5": (fp.RelativeBias, TABLE),
    "t5_causal": (lambda t: fp.RelativeBias(t, bidirectional=False), TABLE),
    "kerple_log": (lambda r: fp.KerpleBias(r[0], r[1]), KERPLE),
    "kerple_power": (lambda r: fp.KerpleBias(r[0], r[1], kernel="power"), KERPLE),
    "fire": (lambda params: fp.FireBias(params, init_threshold=64.0), FIRE),
}


# name: a RoPE the kernel rotates tiles by (every piece of its per-lane rows: both
# layouts, a partial rotation, an attention factor, seq_len-dependent frequencies)
ROPES = {
    "half": fp.RopeConfig(head_dim=128),
    "half_partial": fp.RopeConfig(head_dim=128, rotary_dim=64),
    # halves of 48 features: the GPU kernel loads pieces of 32 and 16
    "half_96": fp.RopeConfig(head_dim=128, rotary_dim=96),
    "interleaved_partial": fp.RopeConfig(
        head_dim=128, rotary_dim=64, layout="interleaved"
    ),
    "interleaved_96": fp.RopeConfig(head_dim=128, rotary_dim=96, layout="interleaved"),
    # halves of 24 features, no power-of-two pieces: on GPU q and k come rotated
    "half_48": fp.RopeConfig(head_dim=128, rotary_dim=48),
    "yarn": rope_reference.make_config("yarn", head_dim=128, original=64),
    "dynamic_ntk": rope_reference.make_config("dynamic_ntk", head_dim=128, original=64),
}


def largest_tensor(module: str) -> int:
    """The most elements of any tensor type in a lowered MLIR module."""
    return max(
        int(np.prod([int(d) for d in m.rstrip("x").split("x")]))
        for m in TENSOR.findall(module)
    )


def assert_gradients_close(got, want, rtol_of_largest, err_msg=""):
    """Every leaf of ``got`` within ``rtol_of_largest`` of ``want``'s largest entry
    (a gradient the softmax ignores is a sum of cancelling terms: rounding-sized)."""
    scale = max(float(np.abs(b).max()) for b in jax.tree.leaves(want))
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(a, b, atol=rtol_of_largest * scale, err_msg=err_msg)
