"""The Pallas kernels' backward: ``dq``, ``dk``, ``dv`` and every trainable bias's
parameters, interpreted, against the ``"xla"`` kernel's gradients (themselves
checked against dense attention in ``tests/test_blockwise.py``). Cases:
``tests/pallas_cases.py``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from pallas_cases import KERNELS, TRAINABLE, assert_gradients_close, inputs

import flax_posenc as fp


def check_gradients(bias_name, length, keys, implementation):
    """dq, dk, dv and the bias's parameters' gradient of the interpreted kernel
    against the xla kernel's (itself checked against dense attention in
    tests/test_blockwise.py), causal with packed segments and left padding. A
    parameter the softmax ignores (FIRE's output bias: a constant per head) has a
    gradient of rounding size, a sum of many cancelling terms: every leaf is
    compared within ``1e-5`` of the call's largest gradient entry."""
    make, params = TRAINABLE[bias_name]
    q, k, v = inputs(length, keys, np.float32)
    q_pos = np.stack([np.maximum(np.arange(length) - 5, 0), np.arange(length)])
    k_pos = np.stack([np.maximum(np.arange(keys) - 5, 0), np.arange(keys)])
    q_seg = np.stack([np.arange(length) >= 5, np.arange(length) // 40]).astype(np.int32)
    k_seg = np.stack([np.arange(keys) >= 5, np.arange(keys) // 40]).astype(np.int32)
    weights = np.cos(np.arange(q.size)).reshape(q.shape).astype(np.float32)

    blocks = KERNELS[implementation]

    def loss(q, k, v, params, implementation):
        out = fp.blockwise_attention(
            q, k, v, q_positions=q_pos, k_positions=k_pos, q_segment_ids=q_seg,
            k_segment_ids=k_seg, bias=make(params), causal=True,
            implementation=implementation, **blocks,
        )  # fmt: skip
        return jnp.sum(out * weights)

    grad = jax.grad(loss, argnums=(0, 1, 2, 3))
    got = grad(q, k, v, params, implementation)
    want = grad(q, k, v, params, "xla")
    assert_gradients_close(got, want, 1e-5, err_msg=bias_name)


@pytest.mark.slow
@pytest.mark.parametrize("implementation", sorted(KERNELS))
@pytest.mark.parametrize("bias_name", sorted(TRAINABLE))
def test_every_bias_gradient_equals_the_xla_kernel(bias_name, implementation):
    check_gradients(bias_name, 72, 136, implementation)
