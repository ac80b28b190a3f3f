"""Blockwise attention: position biases computed per tile, never as ``[N, L, S]``.

``alibi_bias`` and ``relative_position_bias`` return ``[B, N, L, S]``, 64 GiB of
float32 at ``L = S = 32768`` and 16 heads. :func:`blockwise_attention` walks query
blocks and, inside each, key blocks, computes each tile's bias from the positions
and accumulates the softmax online (flash attention's algorithm, in JAX)::

    s    = scale * q_i . k_j + bias(q_pos_i, k_pos_j)     masked to -inf
    m'   = max(m, max_j s)                                 running row maximum
    l'   = l * exp(m - m') + sum_j exp(s - m')             running denominator
    acc' = acc * exp(m - m') + sum_j exp(s - m') v_j
    out  = acc / l                                         after the last key block

Statistics are float32, and the loops are rematerialised: the backward pass
recomputes tiles instead of storing them. A bias is a
:class:`flax_posenc.PositionBias`; ``rope=`` rotates q and k at their positions
first (the Pallas kernels, per tile in fast memory).

Reference: Dao et al., "FlashAttention", NeurIPS 2022; Rabe and Staats,
"Self-attention Does Not Need O(n^2) Memory", 2021.
"""

from __future__ import annotations

from typing import Any

import jax

from flax_posenc.attention import _dispatch
from flax_posenc.attention._spec import AttentionImplementation, check_spec
from flax_posenc.bias.alibi import AlibiBias
from flax_posenc.bias.position_bias import PositionBias
from flax_posenc.bias.relative import RelativeBias
from flax_posenc.rope.config import RopeConfig
from flax_posenc.rope.scaling import SeqLen

__all__ = [
    "AlibiBias",
    "AttentionImplementation",
    "PositionBias",
    "RelativeBias",
    "blockwise_attention",
]  # AlibiBias, RelativeBias and PositionBias live beside their functions


def blockwise_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    q_positions: jax.Array | None = None,
    k_positions: jax.Array | None = None,
    bias: PositionBias | None = None,
    rope: RopeConfig | None = None,
    seq_len: SeqLen = None,
    k_seq_len: SeqLen = None,
    causal: bool = False,
    q_segment_ids: jax.Array | None = None,
    k_segment_ids: jax.Array | None = None,
    mask: jax.Array | None = None,
    scale: float | None = None,
    block_q: int | None = None,
    block_k: int | None = None,
    precision: Any = None,
    implementation: AttentionImplementation = "xla",
) -> jax.Array:
    """Softmax attention with a position bias computed tile by tile.

    ``out[..., i, h] = sum_j softmax_j(scale * q_i . k_j + bias(q_pos_i, k_pos_j)
    | allowed(i, j)) v_j``, over the keys ``j`` that query ``i`` may attend to:
    ``k_pos_j <= q_pos_i`` if ``causal``, equal segment ids if given, and ``mask``
    true. The result equals dense attention with the materialised bias within float32
    rounding; no ``[N, L, S]`` array is formed (see the module docstring).

    A query that may attend to no key gets zeros (and zero gradients), never NaN.
    Grouped-query attention: q head ``h`` reads k/v head ``h // (N // K)`` (as
    ``jnp.repeat(k, N // K, axis=-2)``). Lengths need not divide the block sizes.

    Args:
      q: floating ``[..., L, N, H]``.
      k: floating ``[..., S, K, H]``, the same leading dimensions as q; ``N`` a
        multiple of ``K``.
      v: floating ``[..., S, K, Hv]``.
      q_positions: integer ``[..., L]`` (leading axes broadcast to q's); required
        with ``bias`` or ``causal``. A decode step passes the cache index.
      k_positions: integer ``[..., S]``; None means ``q_positions`` (then ``S ==
        L``). For a KV cache, every slot's position.
      bias: a :class:`PositionBias`: :class:`AlibiBias`, :class:`RelativeBias` or any
        function of ``(q_positions [..., l], k_positions [..., s])`` returning
        ``[..., N, l, s]``; None for no bias.
      rope: a :class:`flax_posenc.RopeConfig` that rotates q and k at their
        positions first (as :func:`flax_posenc.apply_rope_qk`), or None. A Pallas
        ``implementation`` rotates each tile inside the kernel.
      seq_len: for dynamic NTK and LongRoPE: the length their frequencies use
        (None: ``max(q, k positions) + 1``), as in :func:`flax_posenc.apply_rope_qk`.
      k_seq_len: k's own length; None means ``seq_len``.
      causal: mask keys at later positions, ``k_pos > q_pos`` (from the positions,
        so packed sequences and decode steps are right).
      q_segment_ids: integer ``[..., L]``; queries attend only to keys of the same
        segment id (packing; padding as its own id, e.g. 0).
      k_segment_ids: integer ``[..., S]``; None means ``q_segment_ids``.
      mask: bool or 0/1 numeric, broadcastable to ``[..., N, L, S]`` (Flax's masks,
        e.g. ``[B, 1, 1, S]`` of a KV cache), non-zero where attention is allowed;
        sliced per tile.
      scale: the logit scale; None means ``1 / sqrt(H)``.
      block_q: query rows per tile (``min(block_q, L)`` is used); None: 512, or 64
        for ``"pallas_gpu"``.
      block_k: keys per tile (``min(block_k, S)`` is used); None as ``block_q``.
      precision: ``jax.lax.Precision`` of the two matmuls (as in
        ``jnp.einsum``); None is the backend default.
      implementation: the kernel, :data:`flax_posenc.AttentionImplementation`:
        ``"xla"`` (the default, every backend), ``"pallas_tpu"`` or ``"pallas_gpu"``
        (flash attention with the bias and RoPE computed in the kernel; no
        ``mask``, a bias with ``kernel_form()``, block sizes on the hardware's
        tiling; the guide's "Attention on TPU and GPU"), or either's
        ``"_interpret"`` form (Pallas's interpreter, on CPU).

    Returns:
      ``[..., L, N, Hv]`` in q's dtype.

    Raises:
      TypeError: non-floating q/k/v, non-integer positions or segment ids, a
        non-numeric ``mask``, a non-bool ``causal``, a ``bias`` that is not
        callable (or, for a Pallas kernel, has no ``kernel_form()``), non-int block
        sizes, a ``rope`` that is not a :class:`flax_posenc.RopeConfig`.
      ValueError: mismatched shapes or heads; ``bias``, ``causal`` or ``rope``
        without ``q_positions``; positions or segment ids that break the positions
        rule; a bias tile of the wrong shape; a ``mask`` that does not broadcast;
        ``rope`` of another head size or a length below the positions it serves;
        ``scale <= 0`` or block sizes ``<= 0``; an unknown ``implementation``, or
        a Pallas one with a ``mask``, block sizes off its tiling, or lowered off
        its platform.

    Examples:
      ALiBi over 4096 tokens without the ``[4, 4096, 4096]`` bias:

      >>> q = jnp.ones((1, 4096, 4, 16))  # [B, L, N, H]
      >>> out = fp.blockwise_attention(q, q, q, q_positions=jnp.arange(4096),
      ...     bias=fp.AlibiBias(4), causal=True, block_q=1024, block_k=1024)
      >>> out.shape
      (1, 4096, 4, 16)

      A decode step against a 10-slot cache, T5 buckets, grouped-query k/v:

      >>> table = jnp.zeros((32, 4))  # [num_buckets, N]
      >>> out = fp.blockwise_attention(jnp.ones((2, 1, 4, 16)), jnp.ones((2, 10, 2, 16)),
      ...     jnp.ones((2, 10, 2, 16)), q_positions=jnp.full((2, 1), 9),
      ...     k_positions=jnp.arange(10), bias=fp.RelativeBias(table, bidirectional=False),
      ...     causal=True)
      >>> out.shape
      (2, 1, 4, 16)

    Reference: Dao et al., NeurIPS 2022; Press et al., ICLR 2022 (ALiBi); Raffel et
    al., JMLR 2020 (T5).
    """
    spec = check_spec(
        q,
        k,
        v,
        mask=mask,
        q_positions=q_positions,
        k_positions=k_positions,
        q_segment_ids=q_segment_ids,
        k_segment_ids=k_segment_ids,
        bias=bias,
        rope=rope,
        seq_len=seq_len,
        k_seq_len=k_seq_len,
        causal=causal,
        scale=scale,
        block_q=block_q,
        block_k=block_k,
        implementation=implementation,
    )
    return _dispatch.attention(q, k, v, spec, precision)
