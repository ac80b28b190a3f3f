"""RoPE inside the Pallas kernels: each tile of q and k rotated in the kernel,
interpreted, against float64 (RoFormer's pairs) and the ``"xla"`` kernel, values
and gradients; what has no row of float32 frequencies is rotated before the
kernel. Cases: ``tests/pallas_cases.py``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rope_reference
from pallas_cases import HEADS, KERNELS, ROPES, inputs
from test_blockwise import alibi_reference, dense_reference

import flax_posenc as fp


def rope_case(rope_name, dtype, implementation, k_seq_len=None):
    """RoPE inside the interpreted kernel against the ``"xla"`` kernel (the same
    float32 angles: within float32 rounding) and float64 (RoFormer's pairs on the
    float64 frequencies: within the float32 angles' error, ``p * 2^-24`` radians at
    positions below 256). Queries sit after the keys' start (a chunked prefill),
    causal with ALiBi and left padding; dynamic NTK reads ``max(q, k positions) + 1``
    or ``k_seq_len``. Returns the loss's gradient function for the slow test."""
    length, keys, config = 40, 136, ROPES[rope_name]
    q, k, v = inputs(length, keys, dtype)
    q_pos = np.stack([np.arange(length) + 90, np.arange(length) + 96])
    k_pos = np.stack([np.maximum(np.arange(keys) - 5, 0), np.arange(keys)])
    options = {
        "q_positions": q_pos, "k_positions": k_pos, "rope": config, "causal": True,
        "bias": fp.AlibiBias(HEADS), "k_seq_len": k_seq_len,
        **KERNELS[implementation],
    }  # fmt: skip
    out = fp.blockwise_attention(q, k, v, implementation=implementation, **options)
    xla = fp.blockwise_attention(q, k, v, **options)
    seq_len = int(max(q_pos.max(), k_pos.max())) + 1
    rotated = []
    for x, pos, length_of_x in ((q, q_pos, seq_len), (k, k_pos, k_seq_len or seq_len)):
        inv_freq, factor = rope_reference.frequencies(config, length_of_x)
        rotated.append(rope_reference.rope(x, pos, inv_freq, factor, config.layout)[0])
    allowed = (k_pos[:, None, :] <= q_pos[:, :, None])[:, None]
    want = dense_reference(*rotated, v, alibi_reference(q_pos, k_pos, HEADS), allowed)
    tol = 4e-6 if dtype == np.float32 else 2e-2
    np.testing.assert_allclose(
        np.asarray(out, np.float32), np.asarray(xla, np.float32), atol=tol
    )
    angle_tol = 1e-4 if dtype == np.float32 else 3e-2
    np.testing.assert_allclose(np.asarray(out, np.float64), want, atol=angle_tol)
    weights = np.cos(np.arange(q.size)).reshape(q.shape).astype(np.float32)
    return lambda implementation: jax.grad(
        lambda q, k, v: jnp.sum(
            fp.blockwise_attention(q, k, v, implementation=implementation, **options)
            * weights
        ),
        argnums=(0, 1, 2),
    )(q, k, v)


FAST_ROPE_CASES = [
    ("half", np.float32, "pallas_tpu_interpret"),
    ("half_partial", jnp.bfloat16, "pallas_gpu_interpret"),
    ("interleaved_96", np.float32, "pallas_gpu_interpret"),
]


@pytest.mark.parametrize(
    ("rope_name", "dtype", "implementation"),
    FAST_ROPE_CASES
    + [
        pytest.param(name, dtype, implementation, marks=pytest.mark.slow)
        for implementation in KERNELS
        for name in ROPES
        for dtype in (np.float32, jnp.bfloat16)
        if (name, dtype, implementation) not in FAST_ROPE_CASES
    ],
)
def test_rope_in_the_kernel_equals_float64_and_xla(rope_name, dtype, implementation):
    rope_case(rope_name, dtype, implementation)


@pytest.mark.slow
@pytest.mark.parametrize("implementation", sorted(KERNELS))
@pytest.mark.parametrize("rope_name", sorted(ROPES))
def test_rope_in_the_kernel_gradient_equals_the_xla_kernel(rope_name, implementation):
    """dq and dk carried back through the inverse rotation (the transpose: sine
    negated) in the kernels; dynamic NTK with k's own length."""
    k_seq_len = 300 if rope_name == "dynamic_ntk" else None
    grad = rope_case(rope_name, np.float32, implementation, k_seq_len)
    got, want = grad(implementation), grad("xla")
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5 * float(np.abs(b).max()))


@pytest.mark.parametrize("implementation", sorted(KERNELS))
@pytest.mark.parametrize("case", ["exact_angles", "per_token_seq_len"])
def test_rope_without_one_frequency_row_is_rotated_before_the_kernel(
    case, implementation
):
    """Exact angles (float64 on the host) and per-token lengths have no row of
    float32 frequencies for the kernel: q and k are rotated before it, as on
    ``"xla"``, and the values are ``"xla"``'s (exact angles differ from float32
    ones by ~1e-5 at these positions, so a kernel rotating them itself fails)."""
    q, k, v = inputs(40, 40, np.float32)
    positions = np.stack([np.arange(40) + 3000, np.arange(40) + 90])
    rope = {
        "exact_angles": dict(rope=fp.RopeConfig(head_dim=128, angle_precision="exact")),
        "per_token_seq_len": dict(rope=ROPES["dynamic_ntk"], seq_len=positions + 1),
    }[case]
    options = dict(
        q_positions=positions, causal=True, **rope, **KERNELS[implementation]
    )
    out = fp.blockwise_attention(q, k, v, implementation=implementation, **options)
    xla = fp.blockwise_attention(q, k, v, **options)
    np.testing.assert_allclose(out, xla, atol=4e-6)
