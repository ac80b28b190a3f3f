"""The Pallas kernels (``implementation="pallas_tpu"`` and ``"pallas_gpu"``), checked
without a TPU or a GPU.

Truth: the float64 dense softmax of ``tests/test_blockwise.py`` with the float64
biases of ``tests/test_blockwise.py`` and ``tests/length_reference.py`` (the papers'
formulas), and the ``"xla"`` kernel. The kernels run in Pallas's interpreter on CPU
(``"pallas_*_interpret"``: the same kernel body, grid and index maps; the TPU
interpreter simulates the hardware's memories) and are lowered by ``jax.export`` for
TPU (Mosaic) and for CUDA (Triton), where no buffer of ``L * S`` elements may
appear. The interpreter is slow: a few cases run by default, the grid of biases x
masks x dtypes x kernels under ``slow``.

Tolerances: float32 ``4e-6`` against float64 (an online softmax over a few tiles;
the blockwise kernel's own bound), bfloat16 ``2e-2`` (inputs rounded to 8 bits of
mantissa, statistics in float32).
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import length_reference as ref
import numpy as np
import pytest
import rope_reference
from jax import export
from test_blockwise import alibi_reference, dense_reference, t5_reference

import flax_posenc as fp
from flax_posenc.attention import (
    _blockwise,
    _pallas_flash,
    _pallas_gpu,
    _pallas_tiles,
    _spec,
)

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


def check_case(bias_name, causal, segments, length, keys, dtype, implementation):
    """The interpreted kernel against float64 and the xla kernel: left padding
    (sequence 0 starts with 5 padding tokens, their own segment), packed segments
    with positions restarting, grouped k/v heads, lengths off the blocks."""
    q, k, v = inputs(length, keys, dtype)
    q_pos = np.stack([np.maximum(np.arange(length) - 5, 0), np.arange(length)])
    k_pos = np.stack([np.maximum(np.arange(keys) - 5, 0), np.arange(keys)])
    options = {"q_positions": q_pos, "k_positions": k_pos, "causal": causal}
    allowed = np.ones((2, 1, length, keys), bool)
    if causal:
        allowed &= k_pos[:, None, None, :] <= q_pos[:, None, :, None]
    if segments:
        q_seg = np.stack([np.arange(length) >= 5, np.arange(length) // 60])
        k_seg = np.stack([np.arange(keys) >= 5, np.arange(keys) // 60])
        q_seg, k_seg = q_seg.astype(np.int32), k_seg.astype(np.int32)
        options |= {"q_segment_ids": q_seg, "k_segment_ids": k_seg}
        allowed &= k_seg[:, None, None, :] == q_seg[:, None, :, None]
    bias, bias64 = BIASES[bias_name]
    options |= {"bias": bias, **KERNELS[implementation]}
    out = fp.blockwise_attention(q, k, v, implementation=implementation, **options)
    assert out.dtype == q.dtype and out.shape == q.shape
    xla = fp.blockwise_attention(q, k, v, **options)
    want = dense_reference(q, k, v, bias64(q_pos, k_pos), allowed)
    tol = 4e-6 if dtype == np.float32 else 2e-2
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(np.asarray(out, np.float64), want, atol=tol * scale)
    np.testing.assert_allclose(
        np.asarray(out, np.float32), np.asarray(xla, np.float32), atol=tol * scale
    )


@pytest.mark.parametrize(
    ("bias_name", "causal", "segments", "dtype", "implementation"),
    [
        ("alibi", True, True, jnp.bfloat16, "pallas_tpu_interpret"),
        ("t5", True, True, np.float32, "pallas_gpu_interpret"),
        pytest.param(
            "t5",
            False,
            True,
            np.float32,
            "pallas_tpu_interpret",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_interpreted_kernel_equals_float64_and_xla(
    bias_name, causal, segments, dtype, implementation, capsys
):
    """Also: the TPU interpreter, detecting races (its out-of-bounds reads raise
    and its uninitialised memory is NaN by default), prints none."""
    check_case(bias_name, causal, segments, 40, 130, dtype, implementation)
    assert "RACE DETECTED" not in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("segments", [False, True], ids=["", "segments"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("bias_name", sorted(BIASES))
def test_every_bias_mask_and_dtype(bias_name, causal, segments, dtype, capsys):
    check_case(bias_name, causal, segments, 72, 136, dtype, "pallas_tpu_interpret")
    assert "RACE DETECTED" not in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("masks", [False, True], ids=["full", "causal_segments"])
@pytest.mark.parametrize("bias_name", sorted(BIASES))
def test_gpu_kernel_every_bias_and_dtype(bias_name, masks, dtype):
    """The GPU kernel shares the TPU kernel's tile math (masks included): each bias
    and dtype unmasked and with every mask, its own loop, skipping and padding."""
    check_case(bias_name, masks, masks, 72, 136, dtype, "pallas_gpu_interpret")


def test_kernel_forms_equal_each_head_of_the_bias():
    """``KernelBias.tile`` per head, with plain arrays for the scalars, equals the
    bias's own call (the kernel computes exactly this), at distances past T5's
    exact buckets and FIRE's threshold."""
    q_pos = np.array([0, 3, 40, 200, 700])
    k_pos = np.array([0, 5, 39, 41, 199, 650, 700, 2000])
    pairs = [
        jnp.asarray(x, jnp.int32) for x in np.broadcast_arrays(q_pos[:, None], k_pos)
    ]
    for name, (bias, _) in BIASES.items():
        if bias is None:
            continue
        full = np.asarray(bias(jnp.asarray(q_pos), jnp.asarray(k_pos)))
        form = bias.kernel_form()
        shared = lambda j, form=form: form.shared_params[j]
        # FIRE sums its hidden units in another order than the XLA form's fusion:
        # within a few float32 roundings of its size.
        atol = 4e-6 * max(1.0, float(np.abs(full).max())) if name == "fire" else 0.0
        for h in range(HEADS):
            head = lambda i, h=h, form=form: form.head_params[h, i]
            tile = form.tile(head, shared, *pairs)
            np.testing.assert_allclose(
                tile, full[h], rtol=2e-7, atol=atol, err_msg=name
            )


def test_skipped_tiles_fetch_no_new_block():
    """Causal with sorted positions: tile ``(i, j)`` runs for ``j <= i`` only, and a
    skipped step's k/v block is the last that ran (no fetch)."""
    q, k, v = inputs(512, 512, np.float32)
    positions = np.arange(512)
    arrays = _spec.Arrays(positions, None, None, None, None)
    blocks = _blockwise.prepare(q, k, v, arrays, _spec.Options(True, None, 128, 128))
    static = _pallas_tiles.Static(
        scale=1.0, causal=True, positions=True, segments=False, tile=None,
        params_per_head=1, shared_params=1, keys=512, block_q=128, block_k=128, groups=4,
        batch_rows=False, precision=None, interpret=True,
    )  # fmt: skip
    (run, fetch, *_), _, _ = _pallas_flash.operands(blocks, None, static, "pallas_tpu")
    lower = np.tril(np.ones((4, 4), np.int32))
    np.testing.assert_array_equal(run[0], lower)
    np.testing.assert_array_equal(
        fetch[0], np.minimum(np.arange(4)[None], np.arange(4)[:, None])
    )


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


@pytest.mark.parametrize(
    ("platform", "bias_name", "rope_name"),
    [("tpu", "alibi", None), ("tpu", "alibi", "yarn"), ("cuda", "t5", "half")]
    + [
        pytest.param(platform, bias, rope, marks=pytest.mark.slow)
        for platform in PLATFORMS
        for bias, rope in (
            ("t5", None),
            ("none", None),
            ("kerple_log", None),
            ("kerple_power", None),
            ("fire", None),
            ("t5", "interleaved_partial"),
            ("none", "interleaved_96"),
            ("none", "dynamic_ntk"),
            ("alibi", None),
        )
    ],
)
def test_lowers_with_no_buffer_of_l_by_s(platform, bias_name, rope_name):
    """Mosaic (TPU) and Triton (CUDA) lower the forward kernel and its gradient
    (three kernel calls: the forward with its log-sum-exp, ``dq``, ``dk dv`` and the
    bias's parameters) for bfloat16, causal, packed segments and grouped heads at
    ``L = S = 2048``, with RoPE or not; the largest arrays of the module are
    q-sized, below ``L * S``. Where the kernel rotates q and k (TPU; the half
    layout on GPU) no sine or cosine is computed outside it: rotated q and k never
    exist in HBM."""
    implementation, call, disabled = PLATFORMS[platform]
    length, (make, params) = (
        2048,
        TRAINABLE.get(bias_name, (lambda p: None, np.zeros(1))),
    )

    def loss(q, k, v, params, positions, segments):
        out = fp.blockwise_attention(
            q, k, v, q_positions=positions, q_segment_ids=segments, bias=make(params),
            causal=True, implementation=implementation, rope=ROPES.get(rope_name),
        )  # fmt: skip
        return out.astype(jnp.float32).sum()

    shapes = [(1, length, HEADS, 128)] + [(1, length, KV_HEADS, 128)] * 2
    args = [jax.ShapeDtypeStruct(s, jnp.bfloat16) for s in shapes]
    args.append(jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), params))
    args += [jax.ShapeDtypeStruct((1, length), jnp.int32)] * 2
    gradient = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))
    exported = export.export(gradient, platforms=(platform,), disabled_checks=disabled)
    module = exported(*args).mlir_module()
    assert module.count(call) >= 3
    sizes = [
        np.prod([int(d) for d in m.rstrip("x").split("x")])
        for m in TENSOR.findall(module)
    ]
    assert max(sizes) < length * length
    config = ROPES.get(rope_name)
    if platform == "tpu" or config is None or _pallas_gpu.rotates_in_kernel(config):
        assert "stablehlo.sine" not in module and "stablehlo.cosine" not in module


# name: (a function of the bias's parameters, the parameters)
TRAINABLE = {
    "alibi": (lambda params: fp.AlibiBias(HEADS), np.zeros(1, np.float32)),
    "t5": (fp.RelativeBias, TABLE),
    "t5_causal": (lambda t: fp.RelativeBias(t, bidirectional=False), TABLE),
    "kerple_log": (lambda r: fp.KerpleBias(r[0], r[1]), KERPLE),
    "kerple_power": (lambda r: fp.KerpleBias(r[0], r[1], kernel="power"), KERPLE),
    "fire": (lambda params: fp.FireBias(params, init_threshold=64.0), FIRE),
}


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
    scale = max(float(np.abs(b).max()) for b in jax.tree.leaves(want))
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5 * scale, err_msg=bias_name)


@pytest.mark.slow
@pytest.mark.parametrize("implementation", sorted(KERNELS))
@pytest.mark.parametrize("bias_name", sorted(TRAINABLE))
def test_every_bias_gradient_equals_the_xla_kernel(bias_name, implementation):
    check_gradients(bias_name, 72, 136, implementation)


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


@pytest.mark.parametrize(
    ("implementation", "platform"),
    [
        ("pallas_tpu", "cuda"),
        ("pallas_tpu", "cpu"),
        ("pallas_gpu", "tpu"),
        ("pallas_gpu", "cpu"),
    ],
)
def test_a_kernel_lowered_off_its_platform_raises_naming_it(implementation, platform):
    """Each compiled kernel lowers for its platform only: elsewhere (``jit`` on this
    CPU, ``jax.export`` for the other accelerator) the call raises our message,
    before Pallas's own (a bare ``AssertionError`` for Triton on ``tpu``), forward
    and gradient; nothing falls back to another kernel."""

    def loss(q, positions=None):
        positions = jnp.arange(128) if positions is None else positions
        out = fp.blockwise_attention(
            q, q, q, q_positions=positions, causal=True, implementation=implementation
        )
        return out.astype(jnp.float32).sum()

    match = rf"`implementation` '{implementation}' runs on .*lowered for {platform}"
    spec = jax.ShapeDtypeStruct((1, 128, KV_HEADS, 128), jnp.bfloat16)
    for f in (loss, jax.grad(loss)):
        with pytest.raises(ValueError, match=match):
            if platform == "cpu":
                f(jnp.ones(spec.shape, spec.dtype))
            else:
                export.export(jax.jit(f), platforms=(platform,))(spec)
    # On its own platform the check vanishes, also batched (per-example positions:
    # a batched block table).
    own = next(p for p, kernel in PLATFORMS.items() if kernel[0] == implementation)
    checks = PLATFORMS[own][2]
    batched = jax.ShapeDtypeStruct((3, *spec.shape), spec.dtype)
    lowered = export.export(
        jax.jit(jax.vmap(jax.grad(loss))), platforms=(own,), disabled_checks=checks
    )
    lowered(batched, jnp.arange(3 * 128).reshape(3, 128))


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


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        (dict(implementation="pallas"), ValueError, r"`implementation` must be one of"),
        (
            dict(block_q=100),
            ValueError,
            r"`block_q` must be a multiple of 8 .*block_q=96",
        ),
        (
            dict(block_k=200),
            ValueError,
            r"`block_k` must be a multiple of 128 .*block_k=128",
        ),
        (
            dict(bias=lambda q, k: jnp.zeros((HEADS, q.shape[-1], k.shape[-1]))),
            TypeError,
            r"has no kernel_form\(\).*implementation='xla' takes any function",
        ),
        (
            dict(mask=np.ones((16, 16), bool)),
            ValueError,
            r"`mask` is not taken by implementation='pallas_tpu'.*segment ids",
        ),
    ],
)
def test_requests_the_kernel_cannot_serve_raise(options, error, match):
    q, k, v = inputs(16, 16, np.float32)
    options = {"implementation": "pallas_tpu", "q_positions": np.arange(16)} | options
    with pytest.raises(error, match=match):
        fp.blockwise_attention(q, k, v, **options)


@pytest.mark.slow
def test_blockwise_attention_fn_runs_the_kernel_in_flax():
    import flax

    positions = np.arange(16)
    x = np.random.default_rng(1).standard_normal((1, 16, 128)).astype(np.float32)

    def module(implementation):
        return flax.linen.MultiHeadDotProductAttention(
            num_heads=1,
            attention_fn=fp.blockwise_attention_fn(
                q_positions=positions, bias=fp.AlibiBias(1), causal=True,
                block_q=8, implementation=implementation,
            ),
        )  # fmt: skip

    params = module("xla").init(jax.random.key(0), x)
    out = module("pallas_tpu_interpret").apply(params, x)
    np.testing.assert_allclose(out, module("xla").apply(params, x), atol=4e-6)


ON_DEVICE = {"gpu": "pallas_gpu", "tpu": "pallas_tpu"}.get(jax.default_backend())


@pytest.mark.skipif(
    ON_DEVICE is None,
    reason="no GPU or TPU here: the kernels are checked interpreted and lowered",
)
@pytest.mark.parametrize(
    ("bias_name", "rope"),
    [(name, None) for name in sorted(TRAINABLE)]
    + [("t5", "half"), ("alibi", "interleaved_96"), ("fire", "dynamic_ntk")],
)
def test_compiled_kernel_on_its_device_equals_xla(bias_name, rope):
    """On a GPU or TPU (benchmarks/device_check.sh), the compiled kernel's values and
    gradients against the ``"xla"`` kernel's, at ``L = 512``, ``S = 640``, causal with
    packed segments, grouped heads, float32 with the matmuls at full precision; with
    RoPE in the kernel (Triton's strided pieces, Mosaic's lane rotations)."""
    make, params = TRAINABLE[bias_name]
    q, k, v = inputs(512, 640, np.float32)
    q_pos, k_pos = np.arange(512) + 128, np.arange(640)
    q_seg, k_seg = (q_pos >= 300).astype(np.int32), (k_pos >= 300).astype(np.int32)
    weights = np.cos(np.arange(q.size)).reshape(q.shape).astype(np.float32)

    def loss(q, k, v, params, implementation):
        out = fp.blockwise_attention(
            q, k, v, q_positions=q_pos, k_positions=k_pos, q_segment_ids=q_seg,
            k_segment_ids=k_seg, bias=make(params), causal=True, rope=ROPES.get(rope),
            block_q=64,
            block_k=128 if ON_DEVICE == "pallas_tpu" else 64,
            precision=jax.lax.Precision.HIGHEST, implementation=implementation,
        )  # fmt: skip
        return jnp.sum(out * weights), out

    grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3), has_aux=True), static_argnums=4)
    (got, got_out), (want, want_out) = (
        grad(q, k, v, params, name) for name in (ON_DEVICE, "xla")
    )
    np.testing.assert_allclose(got_out, want_out, atol=1e-4)
    scale = max(float(np.abs(b).max()) for b in jax.tree.leaves(want))
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4 * scale, err_msg=bias_name)


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
    scale = max(float(np.abs(b).max()) for b in jax.tree.leaves(want))
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5 * scale, err_msg=bias_name)


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
    sizes = [
        np.prod([int(d) for d in m.rstrip("x").split("x")])
        for m in TENSOR.findall(module)
    ]
    assert max(sizes) < length * length


def test_block_sizes_default_per_kernel_and_are_used_as_given():
    """None means each kernel's own block (512; 64 for Triton's registers); a size
    given is the size used (no cap), down to the padded length."""
    for implementation, default in (
        ("xla", 512),
        ("pallas_tpu", 512),
        ("pallas_gpu", 64),
    ):
        options = _spec.check_settings(implementation=implementation).options
        assert (options.block_q, options.block_k) == (default, default)
    q, k, v = inputs(256, 40, np.float32)
    options = _spec.Options(False, None, 128, 128, "pallas_gpu")
    blocks = _blockwise.prepare(
        q, k, v, _spec.Arrays(None, None, None, None, None), options
    )
    request = _pallas_flash.Request(128, 128, None, True)
    static, _ = _pallas_gpu.prepare(blocks, None, request)
    assert (static.block_q, static.block_k) == (128, 64)  # k: 40 keys pad to 64
