"""Every public jitted path lowers for CUDA and TPU, with no CPU form in the program.

``jax.export`` lowers without the accelerator, so a CPU-only op or a CPU form that
leaked past its switch (``flax_posenc._core.cpu.on_cpu``) shows here. The CPU forms leave
marks that the reference forms do not: the range reduction's ``round_nearest_even``
(sin/cos), bitcasts to ``ui16`` (bfloat16 casts), and the T5 buckets' missing gather.
Each mark is first checked to be in the CPU lowering, so a stale mark fails too.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import flax_posenc as fp

ACCELERATORS = ("cuda", "tpu")
S = jax.ShapeDtypeStruct
ROUND, BF16_BITS = "round_nearest_even", "xui16>"


def _rope(dtype, layout, rotary_dim=None, precision="float32"):
    config = fp.RopeConfig(
        head_dim=64, rotary_dim=rotary_dim, layout=layout, angle_precision=precision
    )
    args = (S((2, 16, 4, 64), dtype), S((2, 16), jnp.int32))
    return (lambda x, p: fp.apply_rope(x, p, config)), args


def _sinusoidal(layout, dim, precision="float32"):
    return (
        lambda p: fp.sinusoidal_encoding(
            p, dim, layout=layout, angle_precision=precision
        )
    ), (S((2, 16), jnp.int32),)


def _mrope():
    config = fp.RopeConfig(head_dim=128, theta=1e6)
    return (lambda x, p: fp.apply_mrope(x, p, config, mrope_section=(16, 24, 24))), (
        S((1, 16, 4, 128), jnp.bfloat16),
        S((3, 1, 16), jnp.int32),
    )


def _blockwise(bias):
    return (
        lambda q, p: fp.blockwise_attention(
            q, q, q, q_positions=p, bias=bias, causal=True, block_q=16, block_k=16
        )
    ), (S((1, 64, 4, 16), jnp.float32), S((64,), jnp.int32))


# name: (fn, args, marks of the CPU forms it holds, what the reference form shows)
CASES = {
    f"apply_rope {jnp.dtype(dtype).name} {layout}{' partial' if r else ''}": (
        *_rope(dtype, layout, r),
        [ROUND] + ([BF16_BITS] if dtype == jnp.bfloat16 and layout == "half" else []),
        ["stablehlo.sine", "stablehlo.cosine"],
    )
    for dtype in (jnp.float32, jnp.bfloat16)
    for layout in ("half", "interleaved")
    for r in (None, 16)
}
CASES |= {
    f"apply_rope exact {jnp.dtype(dtype).name} {layout}": (
        *_rope(dtype, layout, precision="exact"),
        [BF16_BITS] if dtype == jnp.bfloat16 and layout == "half" else [],
        ["stablehlo.sine", "stablehlo.cosine"],
    )
    for dtype in (jnp.float32, jnp.bfloat16)
    for layout in ("half", "interleaved")
}
CASES |= {
    f"sinusoidal_encoding {layout} D={dim}{' exact' if exact else ''}": (
        *_sinusoidal(layout, dim, "exact" if exact else "float32"),
        [] if exact else [ROUND],
        ["stablehlo.sine"],
    )
    for layout in ("half", "interleaved")
    for dim in (64, 33)
    for exact in (False, True)
}
CASES |= {
    "relative_position_bucket": (
        lambda r: fp.relative_position_bucket(r),
        (S((16, 16), jnp.int32),),
        [],
        ["gather"],
    ),
    "relative_position_bias": (
        lambda t, q, k: fp.relative_position_bias(t, q, k),
        (S((32, 4), jnp.float32), S((2, 16), jnp.int32), S((2, 24), jnp.int32)),
        [],
        ["gather"],
    ),
    "alibi_bias": (
        lambda q, k: fp.alibi_bias(q, k, 12),
        (S((16,), jnp.int32), S((24,), jnp.int32)),
        [],
        [],
    ),
    "apply_mrope": (*_mrope(), [ROUND, BF16_BITS], ["stablehlo.sine"]),
    "blockwise_attention alibi": (*_blockwise(fp.AlibiBias(4)), [], []),
    "blockwise_attention t5": (
        *_blockwise(fp.RelativeBias(jnp.zeros((32, 4)), bidirectional=False)),
        [],
        [],
    ),
}


def _lowered_text(fn, args, platforms) -> str:
    try:
        from jax import export  # a submodule to import explicitly before jax 0.8
    except ImportError:  # pragma: no cover - an older jax
        pytest.skip("jax.export is missing")
    return export.export(jax.jit(fn), platforms=platforms)(*args).mlir_module()


@pytest.mark.parametrize("name", list(CASES))
def test_lowers_for_accelerators_without_cpu_forms(name):
    fn, args, cpu_marks, reference_marks = CASES[name]
    cpu = _lowered_text(fn, args, ("cpu",))
    assert all(mark in cpu for mark in cpu_marks), (name, cpu_marks)
    text = _lowered_text(fn, args, ACCELERATORS)
    for mark in (ROUND, BF16_BITS):
        assert mark not in text, (name, mark)
    for mark in reference_marks:
        assert mark in text, (name, mark)
    if name == "relative_position_bucket":
        assert "gather" not in cpu  # the CPU form: compares, no lookup
