"""Each input of an attention call is checked once.

Every check of the package is a ``check_*`` function of ``_validation`` or
``_attention_spec``, named by the argument it checks. A call of a public attention
function (for a Flax ``attention_fn``: building it and one call by Flax) runs each
``(check, argument)`` pair at most once; checking one input at two levels (a ring
call once checked ``q_positions`` four times: twice by the blockwise checks, again by
the public ``apply_rope_qk`` its private core called, and per tile by the bias) fails.
Calls are counted warm (the second call of a shape), so a compiled kernel's trace is
not in the count; the functions that run inside ``shard_map`` are counted while
traced.
"""

from __future__ import annotations

import collections
import inspect
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P
from test_blockwise import qkv

import flax_posenc as fp
from flax_posenc._core import validation as _validation
from flax_posenc.attention import _spec as _attention_spec

CHECKS = {
    fn.__code__
    for module in (_validation, _attention_spec)
    for name, fn in vars(module).items()
    if isinstance(fn, types.FunctionType) and name.lstrip("_").startswith("check")
}


def count_checks(run) -> collections.Counter:
    """``(check, its str arguments)`` of every check ``run()`` makes."""
    seen: collections.Counter = collections.Counter()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code in CHECKS:
            code = frame.f_code
            names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
            words = tuple(
                frame.f_locals[n]
                for n in names
                if isinstance(frame.f_locals.get(n), str)
            )
            seen[(code.co_name, words)] += 1

    sys.setprofile(profile)
    try:
        jax.block_until_ready(run())
    finally:
        sys.setprofile(None)
    return seen


Q, K, V = qkv((2,), 16, 16, 4, 2, 8)
POS = jnp.arange(16)
SEG = jnp.arange(16) // 6
ROPE = fp.RopeConfig(head_dim=8)
MASK = jnp.ones((2, 1, 1, 16), bool)


def mesh():
    auto = (jax.sharding.AxisType.Auto,)
    return jax.make_mesh((jax.device_count(),), ("seq",), axis_types=auto)


def in_shard_map(attend, *args):
    """``attend`` over the sequence axis, traced afresh inside ``shard_map``."""
    specs = tuple(P(None, "seq") for _ in args)
    mapped = jax.shard_map(
        attend, mesh=mesh(), in_specs=specs, out_specs=P(None, "seq"), check_vma=False
    )
    return jax.jit(mapped)(*args)


def flax_call(factory, **kwargs):
    return lambda: factory(**kwargs)(Q, K, V)


CALLS = {
    "blockwise_attention": lambda: fp.blockwise_attention(
        Q, K, V, q_positions=POS, bias=fp.AlibiBias(4), causal=True,
        q_segment_ids=SEG, mask=MASK, block_q=8, block_k=8,
    ),
    "blockwise_attention_fn": flax_call(
        fp.blockwise_attention_fn, q_positions=POS, rope=ROPE,
        bias=fp.RelativeBias(jnp.zeros((32, 4))), causal=True, q_segment_ids=SEG,
    ),
    "positional_attention_fn": lambda: fp.positional_attention_fn(
        q_positions=POS, rope=ROPE, bias=jnp.zeros((4, 16, 16)),
        attention_fn=nnx.dot_product_attention,
    )(Q, Q, Q),  # K = N: Flax's attention at its floor has no grouped heads
    "self_extend_attention": lambda: fp.self_extend_attention(
        Q, K, V, q_positions=POS, rope=ROPE, group_size=2, window=4, block_q=8
    ),
    "dual_chunk_attention": lambda: fp.dual_chunk_attention(
        Q, K, V, q_positions=POS, rope=ROPE, block_q=8,
        config=fp.DualChunkAttentionConfig(
            chunk_size=8, local_size=2, original_max_position_embeddings=8
        ),
    ),
    "sharded_ring_attention": lambda: fp.sharded_ring_attention(
        Q, K, V, mesh=mesh(), axis_name="seq", q_positions=POS, rope=ROPE,
        bias=fp.AlibiBias(4), causal=True, q_segment_ids=SEG, block_q=2, block_k=2,
    ),
    "ring_attention_fn": flax_call(
        fp.ring_attention_fn, mesh=mesh(), axis_name="seq", q_positions=POS,
        rope=ROPE, bias=fp.AlibiBias(4), causal=True, block_q=2, block_k=2,
    ),
    "ring_attention": lambda: in_shard_map(
        lambda q, k, v: fp.ring_attention(
            q, k, v, axis_name="seq", q_positions=jnp.arange(2), rope=ROPE,
            bias=fp.AlibiBias(4), causal=True,
        ),
        Q, K, V,
    ),
    "sharded_kv_cache_attention": lambda: in_shard_map(
        lambda k, v: fp.sharded_kv_cache_attention(
            Q[:, :1], k, v, axis_name="seq", q_positions=jnp.array([15]),
            k_positions=jnp.arange(2), bias=fp.AlibiBias(4), causal=True,
        ),
        K, V,
    ),
}  # fmt: skip


def test_every_public_attention_function_is_counted():
    attention = {
        name
        for name in fp.__all__
        if name.endswith(("attention", "attention_fn"))
        and inspect.isfunction(getattr(fp, name))
    }
    assert attention == set(CALLS)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_each_input_is_checked_once(name):
    CALLS[name]()  # compiled: the warm call below counts the edge alone
    seen = count_checks(CALLS[name])
    assert seen, "no check was counted"
    repeated = {key: n for key, n in seen.items() if n > 1}
    assert not repeated, f"{name} checks again: {repeated}"


def test_the_count_catches_a_second_check():
    """The counter sees a check repeated by a public function called inside."""

    def twice():
        fp.apply_rope(Q, POS, ROPE)
        return fp.apply_rope(Q, POS, ROPE)

    seen = count_checks(twice)
    assert seen[("check_integer_array", ("positions",))] == 2
    assert np.all(np.isfinite(np.asarray(twice())))
