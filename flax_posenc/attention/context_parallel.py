"""Context parallelism: attention over a sequence sharded across devices (a ring).

With the sequence split over a mesh axis of ``n`` devices, each device keeps its
query block while the key/value blocks, with their positions and segment ids, travel
the ring (``jax.lax.ppermute``, ``n - 1`` steps). Each block that arrives is attended
by the kernel of :func:`flax_posenc.blockwise_attention`, the online softmax's
statistics carried from step to step; steps with nothing to attend (causal, disjoint
segments) are skipped, and the gradient runs the transposed ring from the forward's
log-sum-exp, so a device holds ``O(L / n)``, never the full K/V or an ``[N, L, S]``
bias. Positions are global, so RoPE, biases, packed segments and a load-balanced
layout (:func:`flax_posenc.load_balanced_permutation`) need no special case. The
guide's "Context parallelism" page has the algorithm and the memory figures.

* :func:`ring_attention` runs inside ``jax.shard_map`` on local shards;
* :func:`sharded_ring_attention` takes global ``[B, L, N, H]`` arrays and a mesh;
* :func:`ring_attention_fn` is the same as a Flax ``attention_fn``;
* :func:`sharded_kv_cache_attention` decodes against a cache split over the axis.

Reference: Liu, Zaharia and Abbeel, "Ring Attention with Blockwise Transformers for
Near-Infinite Context", 2023; Brandon et al., "Striped Attention", 2023.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from flax_posenc._core.eager import eager_compiled
from flax_posenc._core.pytree import Constants, is_array, join_arrays, split_arrays
from flax_posenc._core.validation import check_positive_int
from flax_posenc.attention import _blockwise, _dispatch, _ring, _ring_pallas
from flax_posenc.attention._flax_signature import flax_attention_fn, require_positions
from flax_posenc.attention._spec import (
    AttentionImplementation,
    Spec,
    check_settings,
    check_spec,
    position_pair,
)
from flax_posenc.bias.position_bias import PositionBias
from flax_posenc.positions import (  # their 0.1.0 home; the shim reads them here
    inverse_load_balanced_permutation as inverse_load_balanced_permutation,
)
from flax_posenc.positions import (
    load_balanced_permutation as load_balanced_permutation,
)
from flax_posenc.rope import _core as _rope
from flax_posenc.rope.config import RopeConfig
from flax_posenc.rope.scaling import SeqLen

__all__ = [
    "ring_attention",
    "ring_attention_fn",
    "sharded_kv_cache_attention",
    "sharded_ring_attention",
]


def ring_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    axis_name: str,
    q_positions: jax.Array | None = None,
    k_positions: jax.Array | None = None,
    bias: PositionBias | None = None,
    rope: RopeConfig | None = None,
    seq_len: SeqLen = None,
    causal: bool = False,
    q_segment_ids: jax.Array | None = None,
    k_segment_ids: jax.Array | None = None,
    scale: float | None = None,
    block_q: int | None = None,
    block_k: int | None = None,
    kv_chunks: int | None = None,
    precision: Any = None,
    implementation: AttentionImplementation = "xla",
) -> jax.Array:
    """Ring attention inside ``jax.shard_map``: this device's queries against every
    device's keys.

    Called on the local shards of a sequence split over mesh axis ``axis_name``: the
    result is this device's rows of :func:`flax_posenc.blockwise_attention` of the
    gathered arrays, whose arguments these are. Positions and segment ids are this
    shard's values of the *global* ones (never ``arange`` of the shard). For dynamic
    NTK and LongRoPE, ``seq_len=None`` is the global ``max(positions) + 1`` (one
    scalar all-reduce over the ring); give ``seq_len`` when other mesh axes split
    the batch and the unsharded run uses the whole batch's maximum.

    Args:
      q: floating ``[..., L, N, H]``, this device's query block.
      k: floating ``[..., S, K, H]``, its key block (``N`` a multiple of ``K``).
      v: floating ``[..., S, K, Hv]``.
      axis_name: the mesh axis that splits the sequence, bound by ``shard_map``
        with ``check_vma=False``.
      q_positions: integer ``[..., L]``, global positions.
      k_positions: integer ``[..., S]``, global; None means ``q_positions``.
      bias: a :class:`flax_posenc.PositionBias`, or None.
      rope: a :class:`flax_posenc.RopeConfig`, or None; the Pallas kernels rotate
        each step's q and k tiles where they can.
      seq_len: for dynamic NTK and LongRoPE (see above).
      causal: mask keys at later positions, ``k_pos > q_pos``.
      q_segment_ids: integer ``[..., L]``; packing, padding as its own id.
      k_segment_ids: integer ``[..., S]``; None means ``q_segment_ids``.
      scale: the logit scale; None means ``1 / sqrt(H)``.
      block_q: query rows per tile.
      block_k: keys per tile.
      kv_chunks: the key/value block goes round in this many chunks (a divisor of
        ``S``), one after another: ``2 / kv_chunks`` of a block in flight instead
        of two blocks, for ``kv_chunks`` times the permutes of the same bytes.
        None chooses the fewest chunks with one chunk of k and v at most an eighth
        of the float32 accumulator ``[..., L, N, Hv]``, or at most ``block_k`` keys.
      precision: ``jax.lax.Precision`` of the matmuls.
      implementation: each ring step's kernel.

    Returns:
      ``[..., L, N, Hv]`` in q's dtype, this device's rows.

    Raises:
      TypeError: what :func:`flax_posenc.blockwise_attention` rejects; a non-str
        ``axis_name``.
      ValueError: what :func:`flax_posenc.blockwise_attention` rejects; an
        ``axis_name`` not bound by an enclosing ``shard_map``, or bound with
        ``check_vma=True``; a ``kv_chunks`` that does not divide ``S``.

    Examples:
      >>> P, AxisType = jax.sharding.PartitionSpec, jax.sharding.AxisType
      >>> mesh = jax.make_mesh((jax.device_count(),), ("seq",),
      ...     axis_types=(AxisType.Auto,))
      >>> def attend(q, positions):
      ...     return fp.ring_attention(q, q, q, axis_name="seq",
      ...         q_positions=positions, bias=fp.AlibiBias(4), causal=True)
      >>> ring = jax.shard_map(attend, mesh=mesh, in_specs=(P(None, "seq"), P("seq")),
      ...     out_specs=P(None, "seq"), check_vma=False)
      >>> q = jnp.ones((1, 64, 4, 16))  # [B, L, N, H]
      >>> ring(q, jnp.arange(64)).shape
      (1, 64, 4, 16)
    """
    _check_axis_name(axis_name, inside="ring_attention")
    spec = check_spec(
        q,
        k,
        v,
        q_positions=q_positions,
        k_positions=k_positions,
        q_segment_ids=q_segment_ids,
        k_segment_ids=k_segment_ids,
        bias=bias,
        rope=rope,
        seq_len=seq_len,
        causal=causal,
        scale=scale,
        block_q=block_q,
        block_k=block_k,
        implementation=implementation,
    )
    kv_chunks = _check_kv_chunks(kv_chunks)
    spec = _global_seq_len(spec, axis_name)
    return _local_ring(q, k, v, spec, axis_name, precision, kv_chunks)


def _check_kv_chunks(kv_chunks: Any) -> int | None:
    if kv_chunks is None:
        return None
    if isinstance(kv_chunks, bool) or not isinstance(kv_chunks, (int, np.integer)):
        raise TypeError(
            f"`kv_chunks` must be None (chosen from the shapes) or a positive int, "
            f"got {kv_chunks!r} ({type(kv_chunks).__name__})."
        )
    return check_positive_int("kv_chunks", kv_chunks)


# What to call instead, per function that runs inside shard_map, when called outside.
_UNBOUND_HINTS = {
    "ring_attention": "fp.sharded_ring_attention(q, k, v, mesh=mesh, axis_name=...) "
    "takes global arrays.",
    "sharded_kv_cache_attention": "call it from the decode step inside "
    "jax.shard_map(step, mesh=mesh, ...), the cache split over that axis (the "
    "function's example shows it); on one device, fp.blockwise_attention attends the "
    "whole cache.",
}


def _check_axis_name(axis_name: Any, *, inside: str | None) -> None:
    """``axis_name`` a str, and bound by an enclosing ``shard_map`` with
    ``check_vma=False`` when ``inside`` names the public function that runs there."""
    if not isinstance(axis_name, str):
        raise TypeError(
            f"`axis_name` must be a mesh axis name (str), got {axis_name!r}. Hint: "
            'the axis that splits the sequence, e.g. axis_name="seq".'
        )
    if inside is not None:
        try:
            _ring.axis_size(axis_name)
        except NameError:
            raise ValueError(
                f"`axis_name` {axis_name!r} is not bound: {inside} runs inside "
                "jax.shard_map over a mesh with that axis, and was called outside "
                f"one. Hint: {_UNBOUND_HINTS[inside]}"
            ) from None
        if axis_name in _typed_varying(jax.lax.axis_index(axis_name)):
            raise ValueError(
                f"{inside} runs inside jax.shard_map(..., check_vma=False), and the "
                f"enclosing shard_map over {axis_name!r} checks varying axes "
                "(check_vma=True, its default): the ring's skipped steps and merged "
                "statistics are not typed for it. Hint: jax.shard_map(f, mesh=mesh, "
                "in_specs=..., out_specs=..., check_vma=False)."
            )


def _typed_varying(x: jax.Array) -> frozenset:
    """The mesh axes ``x``'s type says it varies over, under a ``shard_map`` that
    checks them (``.vma`` before jax 0.9, ``.manual_axis_type.varying`` since)."""
    aval = jax.typeof(x)
    manual = getattr(aval, "manual_axis_type", None)
    return frozenset(getattr(manual, "varying", getattr(aval, "vma", ())))


def _global_seq_len(spec: Spec, axis_name: str | None) -> Spec:
    """``spec`` with RoPE's default length (where its frequencies follow one) the
    *global* ``max(positions) + 1``, never a shard's own: the maximum over the ring
    ``axis_name`` (one scalar all-reduce), or of global positions (None)."""
    rotation = spec.rotation
    if rotation is None or rotation.seq_len is not None:
        return spec
    if not rotation.config.depends_on_seq_len:
        return spec
    length = _rope.shared_seq_len(*position_pair(spec.arrays))
    if axis_name is not None:
        length = jax.lax.pmax(length, axis_name)
    return spec._replace(rotation=rotation._replace(seq_len=length))


def _local_ring(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    spec: Spec,
    axis_name: str,
    precision: Any,
    kv_chunks: int | None,
) -> jax.Array:
    """The ring on local shards, q and k rotated by the spec's RoPE first unless
    the kernels rotate them (:mod:`flax_posenc.attention._dispatch`)."""
    q, k, rotation = _dispatch.rotated_unless_in_kernel(q, k, spec)
    implementation = spec.options.implementation
    blocks = _blockwise.prepare(q, k, v, spec.arrays, spec.options)
    if kv_chunks is None:
        kv_chunks = _ring.default_kv_chunks(blocks)
    keys = blocks.k.shape[1]
    if keys % kv_chunks:
        nearest = max(d for d in range(1, kv_chunks) if keys % d == 0)
        raise ValueError(
            f"`kv_chunks` = {kv_chunks} must divide this device's key length "
            f"{keys}. Hint: a divisor of {keys}, e.g. kv_chunks={nearest}, or "
            "None to choose from the shapes."
        )
    if implementation == "xla":
        return _ring.attention(blocks, spec.bias, axis_name, precision, kv_chunks)
    ring = _ring.Ring(axis_name, _ring.axis_size(axis_name), kv_chunks)
    if implementation == "pallas_tpu_interpret" and ring.size > 1:
        raise ValueError(
            "`implementation` 'pallas_tpu_interpret' cannot run on a ring of "
            f"{ring.size} devices: the TPU interpreter runs the devices' kernels in "
            "lockstep, and the ring's collectives wait on them. Hint: "
            "'pallas_gpu_interpret' checks the ring with a kernel on CPU (the same "
            "ring code), 'pallas_tpu' runs it on TPUs."
        )
    backend = _dispatch.backend_of(implementation)
    request = _dispatch.request_of(spec.options, precision)
    return _ring_pallas.attention(blocks, spec.bias, ring, backend, request, rotation)


def sharded_ring_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    mesh: Mesh,
    axis_name: str,
    batch_axis: str | None = None,
    q_positions: jax.Array | None = None,
    k_positions: jax.Array | None = None,
    bias: PositionBias | None = None,
    rope: RopeConfig | None = None,
    seq_len: SeqLen = None,
    causal: bool = False,
    q_segment_ids: jax.Array | None = None,
    k_segment_ids: jax.Array | None = None,
    scale: float | None = None,
    block_q: int | None = None,
    block_k: int | None = None,
    kv_chunks: int | None = None,
    precision: Any = None,
    implementation: AttentionImplementation = "xla",
) -> jax.Array:
    """Ring attention of global arrays, the sequence split over ``mesh``'s
    ``axis_name``.

    :func:`ring_attention` in a ``jax.shard_map`` with q/k/v ``[B, L, N, H]`` split
    as ``P(batch_axis, axis_name)``, positions and segment ids with them, the bias's
    arrays replicated; equal to :func:`flax_posenc.blockwise_attention` of the same
    arguments within float32 rounding. Under ``jit`` the inputs may come with any
    sharding (the partitioner moves them); this layout avoids the move. For dynamic
    NTK and LongRoPE, ``seq_len=None`` is the whole batch's ``max(positions) + 1``.

    Args:
      q: floating ``[B, L, N, H]``, ``L`` a multiple of the axis size ``n``.
      k: floating ``[B, S, K, H]``, ``S`` a multiple of ``n``.
      v: floating ``[B, S, K, Hv]``.
      mesh: the ``jax.sharding.Mesh``.
      axis_name: the mesh axis that splits the sequence.
      batch_axis: a mesh axis that splits the batch too (data parallel), or None.
      q_positions: integer ``[L]`` or ``[B, L]``, global positions.
      k_positions: integer ``[S]`` or ``[B, S]``; None means ``q_positions``.
      bias: as in :func:`ring_attention`.
      rope: as in :func:`ring_attention`.
      seq_len: as in :func:`ring_attention`.
      causal: as in :func:`ring_attention`.
      q_segment_ids: integer ``[L]`` or ``[B, L]``.
      k_segment_ids: integer ``[S]`` or ``[B, S]``; None means ``q_segment_ids``.
      scale: as in :func:`ring_attention`.
      block_q: query rows per tile of a shard.
      block_k: keys per tile of a shard.
      kv_chunks: as in :func:`ring_attention`, a divisor of ``S / n``.
      precision: as in :func:`ring_attention`.
      implementation: as in :func:`ring_attention`.

    Returns:
      ``[B, L, N, Hv]`` in q's dtype, sharded like q.

    Raises:
      TypeError: what :func:`ring_attention` rejects; a ``mesh`` that is not a
        ``jax.sharding.Mesh``.
      ValueError: what :func:`ring_attention` rejects; q/k/v not of rank 4; an
        axis not in the mesh; ``L``, ``S`` or ``B`` not divisible by their axis.

    Examples:
      T5 buckets over 8 devices, packed segments across shard boundaries:

      >>> mesh = jax.make_mesh((jax.device_count(),), ("seq",))
      >>> q = jnp.ones((2, 64, 4, 16))  # [B, L, N, H]
      >>> out = fp.sharded_ring_attention(q, q, q, mesh=mesh, axis_name="seq",
      ...     q_positions=jnp.arange(64) % 24, q_segment_ids=jnp.arange(64) // 24,
      ...     bias=fp.RelativeBias(jnp.zeros((32, 4))), block_q=8, block_k=8)
      >>> out.shape
      (2, 64, 4, 16)
    """
    _check_mesh(mesh, axis_name, batch_axis)
    spec = check_spec(
        q,
        k,
        v,
        q_positions=q_positions,
        k_positions=k_positions,
        q_segment_ids=q_segment_ids,
        k_segment_ids=k_segment_ids,
        bias=bias,
        rope=rope,
        seq_len=seq_len,
        causal=causal,
        scale=scale,
        block_q=block_q,
        block_k=block_k,
        implementation=implementation,
    )
    mesh_call = _MeshCall(mesh, axis_name, batch_axis, _check_kv_chunks(kv_chunks))
    _check_mesh_shapes(q, k, spec, mesh_call)
    return _run_sharded(q, k, v, spec, mesh_call, precision)


class _MeshCall(NamedTuple):
    """The checked mesh arguments of the mesh wrappers."""

    mesh: Mesh
    axis_name: str
    batch_axis: str | None
    kv_chunks: int | None


def _check_mesh(mesh: Any, axis_name: Any, batch_axis: Any) -> None:
    """``mesh`` a Mesh with ``axis_name`` and ``batch_axis`` (two different axes)."""
    if not isinstance(mesh, Mesh):
        raise TypeError(
            f"`mesh` must be a jax.sharding.Mesh, got {type(mesh).__name__}. Hint: "
            'jax.make_mesh((n,), ("seq",)).'
        )
    _check_axis_name(axis_name, inside=None)
    for name, axis in (("axis_name", axis_name), ("batch_axis", batch_axis)):
        if axis is not None and axis not in mesh.axis_names:
            raise ValueError(
                f"`{name}` must be an axis of the mesh {tuple(mesh.axis_names)}, got "
                f"{axis!r}."
            )
    if batch_axis == axis_name:
        raise ValueError(
            f"`batch_axis` must differ from `axis_name`, both are {axis_name!r}."
        )


def _check_mesh_shapes(q: Any, k: Any, spec: Spec, call: _MeshCall) -> None:
    """Global ``[B, L, N, H]`` arrays that the mesh's axes divide; positions and
    segment ids ``[L]`` or ``[B, L]``; one ``seq_len`` for every token."""
    if q.ndim != 4:
        raise ValueError(
            f"`q`, `k`, `v` must be [B, L, N, H] for a mesh, got rank {q.ndim} "
            f"(shape {q.shape}). Hint: reshape the leading axes into B, or call "
            "ring_attention inside your own shard_map."
        )
    mesh, axis_name, batch_axis = call.mesh, call.axis_name, call.batch_axis
    size = mesh.shape[axis_name]
    for name, length in (("L", q.shape[1]), ("S", k.shape[1])):
        if length % size:
            raise ValueError(
                f"{name} = {length} must be a multiple of the size of axis "
                f"{axis_name!r} ({size}). Hint: pad the sequence to a multiple of "
                f"{size} and give the padding its own segment id."
            )
    if batch_axis is not None and q.shape[0] % mesh.shape[batch_axis]:
        raise ValueError(
            f"B = {q.shape[0]} must be a multiple of the size of `batch_axis` "
            f"{batch_axis!r} ({mesh.shape[batch_axis]})."
        )
    for name, ids in spec.arrays._asdict().items():
        if ids is not None and ids.ndim > 2:
            raise ValueError(
                f"`{name}` must be [L] or [B, L] for a mesh, got shape {ids.shape}."
            )
    if spec.rotation is not None and getattr(spec.rotation.seq_len, "ndim", 0):
        raise ValueError(
            "A per-token `seq_len` is not supported on a mesh; give an int or None."
        )


def _run_sharded(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    spec: Spec,
    call: _MeshCall,
    precision: Any,
) -> jax.Array:
    """``shard_map`` of :func:`_local_ring` over checked global arrays: compiled
    once per static configuration when called eagerly, inline under a
    transformation (:mod:`flax_posenc._core.eager`)."""
    arrays, constants = split_arrays((q, k, v, spec))
    static = (constants, call, precision)
    if eager_compiled(arrays, static):
        return _compiled_mapped(arrays, static)
    return _mapped(arrays, static)


def _mapped(arrays: list[Any], static: tuple[Constants, _MeshCall, Any]) -> jax.Array:
    """The ``shard_map`` of :func:`_local_ring` over the arrays of ``(q, k, v,
    spec)``, each placed by :func:`_partition`."""
    constants, call, precision = static
    q, k, v, spec = join_arrays(arrays, constants)
    tree = (q, k, v, _global_seq_len(spec, None))  # the length in the graph
    arrays, constants = split_arrays(tree)
    leaves = jax.tree_util.tree_leaves_with_path(tree)
    specs = [_partition(path, x, call) for path, x in leaves if is_array(x)]

    def local(arrays: list[Any]) -> jax.Array:
        q, k, v, spec = join_arrays(arrays, constants)
        return _local_ring(q, k, v, spec, call.axis_name, precision, call.kv_chunks)

    mapped = jax.shard_map(
        local,
        mesh=call.mesh,
        in_specs=(specs,),
        out_specs=P(call.batch_axis, call.axis_name),
        check_vma=False,
    )
    return mapped(_place(arrays, call.mesh, specs))


_compiled_mapped = jax.jit(_mapped, static_argnames="static")


def _partition(path: tuple, x: jax.Array, call: _MeshCall) -> Any:
    """Where an array of ``(q, k, v, spec)`` lives on the mesh: q/k/v split along
    the batch and the sequence; positions and segment ids along the sequence (and
    the batch, if per example); the bias's arrays and RoPE's length replicated."""
    if path[0].idx < 3:
        return P(call.batch_axis, call.axis_name)
    if path[1].name != "arrays":
        return P()
    if x.ndim == 1:
        return P(call.axis_name)
    return P(call.batch_axis if x.shape[0] > 1 else None, call.axis_name)


def _place(arrays: list[Any], mesh: Mesh, specs: list[Any]) -> list[Any]:
    """``arrays`` resharded to ``specs`` where the mesh has ``Explicit`` axes
    (sharding in types: shard_map then takes only inputs of its specs)."""
    explicit = getattr(jax.sharding.AxisType, "Explicit", None)
    if explicit is None or explicit not in tuple(getattr(mesh, "axis_types", ())):
        return arrays  # Auto axes: shard_map's inputs are resharded by the partitioner
    # device_put, not jax.reshard: at jax 0.7 reshard's transpose (in grad) loses
    # the mesh.
    return [
        jax.device_put(x, jax.sharding.NamedSharding(mesh, spec))
        for x, spec in zip(arrays, specs, strict=True)
    ]


def ring_attention_fn(
    *,
    mesh: Mesh,
    axis_name: str,
    q_positions: jax.Array,
    k_positions: jax.Array | None = None,
    batch_axis: str | None = None,
    bias: PositionBias | None = None,
    rope: RopeConfig | None = None,
    seq_len: SeqLen = None,
    causal: bool = False,
    q_segment_ids: jax.Array | None = None,
    k_segment_ids: jax.Array | None = None,
    scale: float | None = None,
    block_q: int | None = None,
    block_k: int | None = None,
    kv_chunks: int | None = None,
    implementation: AttentionImplementation = "xla",
) -> Callable[..., jax.Array]:
    """A Flax ``attention_fn`` that runs ring attention with the sequence sharded.

    The drop-in for ``nnx.MultiHeadAttention`` / ``linen.MultiHeadDotProductAttention``
    under a mesh: ``attn(q, k, v, ...) = sharded_ring_attention(q, k, v, mesh=mesh,
    axis_name=axis_name, ...)`` with the options given here. The module's
    projections stay ordinary sharded matmuls, and attention is the only place that
    communicates. Use it under ``jax.jit``, the activations sharded
    ``P(batch_axis, axis_name)``; Flax's ``is_causal=True`` means ``causal=True``.

    Args:
      mesh: as in :func:`sharded_ring_attention`, whose arguments these are.
      axis_name: as there.
      q_positions: as there (required).
      k_positions: as there.
      batch_axis: as there.
      bias: as there.
      rope: as there.
      seq_len: as there.
      causal: as there.
      q_segment_ids: as there.
      k_segment_ids: as there.
      scale: as there.
      block_q: as there.
      block_k: as there.
      kv_chunks: as there.
      implementation: as there.

    Returns:
      A function with the keywords of Flax's ``dot_product_attention``.

    Raises:
      ValueError: no ``q_positions``; what :func:`sharded_ring_attention` rejects;
        (when called) a ``mask`` (say padding and packing with segment ids, and
        causal with ``causal``), dropout with ``deterministic=False``, or
        ``sow_weights=True``.
      TypeError: what :func:`sharded_ring_attention` rejects.

    Examples:
      >>> mesh = jax.make_mesh((jax.device_count(),), ("seq",))
      >>> attention = flax.linen.MultiHeadDotProductAttention(
      ...     num_heads=4, attention_fn=fp.ring_attention_fn(mesh=mesh,
      ...         axis_name="seq", q_positions=jnp.arange(64),
      ...         bias=fp.AlibiBias(4), causal=True, block_q=8, block_k=8))
      >>> x = jnp.ones((1, 64, 32))  # [B, L, D]
      >>> params = attention.init(jax.random.key(0), x)
      >>> attention.apply(params, x).shape
      (1, 64, 32)
    """
    require_positions(q_positions, "ring attention")
    _check_mesh(mesh, axis_name, batch_axis)
    settings = check_settings(
        q_positions=q_positions,
        k_positions=k_positions,
        q_segment_ids=q_segment_ids,
        k_segment_ids=k_segment_ids,
        bias=bias,
        rope=rope,
        seq_len=seq_len,
        causal=causal,
        scale=scale,
        block_q=block_q,
        block_k=block_k,
        implementation=implementation,
    )
    mesh_call = _MeshCall(mesh, axis_name, batch_axis, _check_kv_chunks(kv_chunks))

    def run(
        query: jax.Array, key: jax.Array, value: jax.Array, spec: Spec, precision: Any
    ) -> jax.Array:
        """``sharded_ring_attention(query, key, value, ...)``."""
        mask = spec.arrays.mask
        if mask is not None:
            raise ValueError(
                f"Ring attention takes no `mask` array, got shape {mask.shape}: it "
                "would need the whole [L, S] on every device. Hint: causal=True for "
                "a causal mask, q_segment_ids for packing and padding."
            )
        _check_mesh_shapes(query, key, spec, mesh_call)
        return _run_sharded(query, key, value, spec, mesh_call, precision)

    return flax_attention_fn(settings, run, "Ring attention", "dropout_rate=0.0.")


def sharded_kv_cache_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    axis_name: str,
    q_positions: jax.Array | None = None,
    k_positions: jax.Array | None = None,
    bias: PositionBias | None = None,
    causal: bool = False,
    mask: jax.Array | None = None,
    scale: float | None = None,
    block_k: int = 512,
    precision: Any = None,
) -> jax.Array:
    """Decoding against a KV cache split over a mesh axis, inside ``jax.shard_map``.

    Every device holds the same queries (a decode step, or a short chunk) and its
    slice of the cache with those slots' positions. Each attends its slice
    blockwise; the devices' partial ``(max, sum, acc)`` statistics are merged with
    one all-gather (``O(n L N Hv)`` floats, never the cache), and every device
    returns :func:`flax_posenc.blockwise_attention` over the whole cache.

    Args:
      q: floating ``[..., L, N, H]``, the same on every device of the axis.
      k: floating ``[..., S_local, K, H]``, this device's cache slots.
      v: floating ``[..., S_local, K, Hv]``.
      axis_name: the mesh axis that splits the cache, bound by ``shard_map`` with
        ``check_vma=False``.
      q_positions: integer ``[..., L]``, the new tokens' positions.
      k_positions: integer ``[..., S_local]``, these slots' positions; None means
        ``q_positions``.
      bias: as in :func:`flax_posenc.blockwise_attention`.
      causal: as there.
      mask: as there, this slice's ``[..., N, L, S_local]`` (e.g. slots not
        written yet).
      scale: as there.
      block_k: cache slots per tile.
      precision: as there.

    Returns:
      ``[..., L, N, Hv]`` in q's dtype, the same on every device.

    Raises:
      TypeError: what :func:`flax_posenc.blockwise_attention` rejects; a non-str
        ``axis_name``.
      ValueError: what :func:`flax_posenc.blockwise_attention` rejects; an unbound
        ``axis_name``, or one bound with ``check_vma=True``.

    Examples:
      >>> P, AxisType = jax.sharding.PartitionSpec, jax.sharding.AxisType
      >>> mesh = jax.make_mesh((jax.device_count(),), ("seq",),
      ...     axis_types=(AxisType.Auto,))
      >>> def step(q, k, slots):
      ...     return fp.sharded_kv_cache_attention(q, k, k, axis_name="seq",
      ...         q_positions=jnp.array([40]), k_positions=slots, causal=True)
      >>> decode = jax.shard_map(step, mesh=mesh,
      ...     in_specs=(P(), P(None, "seq"), P("seq")), out_specs=P(), check_vma=False)
      >>> k = jnp.ones((1, 64, 2, 16))  # [B, S, K, H], S split over the devices
      >>> decode(jnp.ones((1, 1, 4, 16)), k, jnp.arange(64)).shape
      (1, 1, 4, 16)
    """
    _check_axis_name(axis_name, inside="sharded_kv_cache_attention")
    spec = check_spec(
        q,
        k,
        v,
        mask=mask,
        q_positions=q_positions,
        k_positions=k_positions,
        bias=bias,
        causal=causal,
        scale=scale,
        block_k=block_k,
    )
    blocks = _blockwise.prepare(q, k, v, spec.arrays, spec.options)
    return _ring.decode(blocks, spec.bias, axis_name, precision)
