"""Ring attention with a Pallas kernel per step: interpreted on 4 host devices
against the ``"xla"`` ring (itself checked against float64 dense attention in
``tests/test_ring_attention.py``), values and gradients, and lowered for TPU and
CUDA. Cases: ``tests/pallas_cases.py``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export
from pallas_cases import (
    HEADS,
    KERNELS,
    KV_HEADS,
    PLATFORMS,
    ROPES,
    TABLE,
    TRAINABLE,
    assert_gradients_close,
    inputs,
    largest_tensor,
)

import flax_posenc as fp


def ring_case(bias_name, kv_chunks, implementation="pallas_gpu_interpret", rope=None):
    """sharded_ring_attention on 4 host devices with a Pallas kernel per step
    against the ``"xla"`` ring (itself checked against float64 dense attention in
    tests/test_ring_attention.py): causal, packed segments with left padding
    crossing the shards, grouped heads, ``kv_chunks`` chunks per block, RoPE
    ``ROPES[rope]`` in the kernels or none. Returns the two rings as functions of
    ``(q, k, v, bias parameters)``."""
    make, params = TRAINABLE[bias_name]
    length = 128
    mesh = jax.make_mesh((4,), ("seq",), axis_types=(jax.sharding.AxisType.Auto,))
    positions = np.stack([np.maximum(np.arange(length) - 5, 0), np.arange(length)])
    ids = np.stack([np.arange(length) >= 5, np.arange(length) // 40]).astype(np.int32)
    blocks = KERNELS[implementation]

    def ring(implementation):
        def attend(q, k, v, params):
            return fp.sharded_ring_attention(
                q, k, v, mesh=mesh, axis_name="seq", q_positions=positions,
                q_segment_ids=ids, bias=make(params), causal=True, rope=ROPES.get(rope),
                kv_chunks=kv_chunks, implementation=implementation, **blocks,
            )  # fmt: skip

        return attend

    qkv = inputs(length, length, np.float32)
    return qkv, params, ring(implementation), ring("xla")


@pytest.mark.parametrize("rope", [None, "dynamic_ntk"])
def test_ring_on_the_kernel_equals_the_xla_ring(rope):
    """Each ring step's tiles by the interpreted GPU kernel, the steps merged by
    their log-sum-exp: the output equals the ``"xla"`` ring's. With dynamic NTK
    rotated in the kernels, from the ring's global length (a shard's own maximum
    position would give other frequencies on all but the last device)."""
    (q, k, v), params, kernel, xla = ring_case("alibi", 2, rope=rope)
    np.testing.assert_allclose(kernel(q, k, v, params), xla(q, k, v, params), atol=4e-6)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("bias_name", "kv_chunks", "rope"),
    [("t5", 1, None), ("t5", 2, None), ("fire", 1, None), ("fire", 2, None)]
    + [("t5", 2, "interleaved_partial"), ("alibi", 1, "yarn")],
)
def test_ring_on_the_kernel_gradient_equals_the_xla_ring(bias_name, kv_chunks, rope):
    """dq added up in place, dk/dv travelling with their chunk, the bias's
    parameters summed over the devices: equal to the ``"xla"`` ring's gradients;
    with RoPE in the kernels, dq and dk come back unrotated."""
    (q, k, v), params, kernel, xla = ring_case(bias_name, kv_chunks, rope=rope)
    weights = np.cos(np.arange(q.size)).reshape(q.shape).astype(np.float32)
    grad = lambda attend: jax.grad(
        lambda *args: jnp.sum(attend(*args) * weights), argnums=(0, 1, 2, 3)
    )(q, k, v, params)
    got, want = grad(kernel), grad(xla)
    assert_gradients_close(got, want, 1e-5, err_msg=bias_name)


def test_ring_refuses_the_tpu_interpreter_on_several_devices():
    """The TPU interpreter runs the devices' kernels in lockstep and the ring's
    collectives wait on them (a deadlock, found the hard way): refused, naming the
    interpreter that checks the ring instead."""
    (q, k, v), params, kernel, _ = ring_case("alibi", 1, "pallas_tpu_interpret")
    with pytest.raises(ValueError, match="pallas_gpu_interpret' checks the ring"):
        kernel(q, k, v, params)


@pytest.mark.parametrize(
    "platform", ["tpu", pytest.param("cuda", marks=pytest.mark.slow)]
)
def test_ring_on_the_kernel_lowers_with_no_buffer_of_l_by_s(platform):
    """sharded_ring_attention's gradient on 4 devices at ``L = 4096``, with YaRN,
    lowers with the kernels in every step (the first, the loop's, the last:
    forward, ``dq`` and ``dk dv`` each), no array of ``L * S`` elements, and no sine
    or cosine outside the kernels (RoPE rotates the tiles in them)."""
    implementation, call, disabled = PLATFORMS[platform]
    length = 4096
    mesh = jax.make_mesh((4,), ("seq",), axis_types=(jax.sharding.AxisType.Auto,))

    def loss(q, k, v, table, positions):
        out = fp.sharded_ring_attention(
            q, k, v, mesh=mesh, axis_name="seq", q_positions=positions,
            bias=fp.RelativeBias(table), causal=True, rope=ROPES["yarn"],
            implementation=implementation,
        )  # fmt: skip
        return out.astype(jnp.float32).sum()

    shapes = [(1, length, HEADS, 128)] + [(1, length, KV_HEADS, 128)] * 2
    args = [jax.ShapeDtypeStruct(s, jnp.bfloat16) for s in shapes]
    args += [jax.ShapeDtypeStruct(TABLE.shape, jnp.float32)]
    args += [jax.ShapeDtypeStruct((1, length), jnp.int32)]
    gradient = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))
    exported = export.export(gradient, platforms=(platform,), disabled_checks=disabled)
    module = exported(*args).mlir_module()
    assert module.count(call) == 9
    assert "stablehlo.sine" not in module and "stablehlo.cosine" not in module
    assert largest_tensor(module) < length * length
