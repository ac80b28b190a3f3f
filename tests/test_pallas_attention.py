"""The Pallas kernels' forward (``implementation="pallas_tpu"`` and ``"pallas_gpu"``),
checked without a TPU or a GPU: interpreted against float64 and the ``"xla"`` kernel,
lowered for TPU and CUDA, their refusals; the compiled kernel on a device where
there is one. Truths and cases: ``tests/pallas_cases.py``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export
from pallas_cases import (
    BIASES,
    HEADS,
    KERNELS,
    KV_HEADS,
    PLATFORMS,
    ROPES,
    TRAINABLE,
    assert_gradients_close,
    inputs,
    largest_tensor,
)
from test_blockwise import dense_reference

import flax_posenc as fp
from flax_posenc.attention import (
    _blockwise,
    _pallas_flash,
    _pallas_gpu,
    _pallas_tiles,
    _spec,
)


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
    assert largest_tensor(module) < length * length
    config = ROPES.get(rope_name)
    if platform == "tpu" or config is None or _pallas_gpu.rotates_in_kernel(config):
        assert "stablehlo.sine" not in module and "stablehlo.cosine" not in module


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
    assert_gradients_close(got, want, 1e-4, err_msg=bias_name)


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
