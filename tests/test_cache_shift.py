"""rope_shift: keys rotated at ``p`` moved to ``p + delta`` equal keys rotated at
``p + delta``, against the float64 transcription of RoPE (``rope_reference``)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rope_reference as ref
from helpers import normal

import flax_posenc as fp

LAYOUTS = ("half", "interleaved")
DTYPES = (jnp.float32, jnp.bfloat16)
POSITIONS = np.array([[0, 1, 2, 3, 4], [7, 100, 999, 2500, 4095]])
DELTAS = {  # scalar and per key, negative included (eviction shifts down)
    "negative_scalar": -7,
    "per_key": np.array([3, -1, 100, -2000, 0]),
    "per_sequence_and_key": np.array([[0, 0, -1, -1, -1], [4000, -7, 1, -999, 12]]),
}
SEQ_LEN = 5000  # the shared seq_len of dynamic NTK and LongRoPE (past ORIGINAL)


def assert_within_rotation_bound(
    got, x, truth, positions, inv_freq, attention, layout, ulps
):
    """Error bound of two float32-angle rotations, each rounded to ``got.dtype``:
    per pair of norm ``r`` (times ``attention``), two half ulps of the dtype, the
    angles' error ``ulps * 2^-24 * (|p| + |delta|) * inv_freq`` and float32
    arithmetic (``2^-20 r``). Pass-through features are bit-identical."""
    rotary_dim = 2 * len(inv_freq)
    a_idx, b_idx = ref.pair_indices(rotary_dim, layout)
    xf = np.asarray(x, np.float64)
    radius = np.hypot(xf[..., a_idx], xf[..., b_idx]) * attention
    angle = np.asarray(positions, np.float64)[..., None, None] * inv_freq
    eps = float(jnp.finfo(got.dtype).eps)
    bound = radius * (eps + ulps * 2.0**-24 * angle + 2.0**-20)
    err = np.abs(np.asarray(got, np.float64) - truth)
    np.testing.assert_array_less(err[..., a_idx], bound + 1e-30)
    np.testing.assert_array_less(err[..., b_idx], bound + 1e-30)
    np.testing.assert_array_equal(
        np.asarray(got[..., rotary_dim:]), np.asarray(x[..., rotary_dim:])
    )


# Partial rotary for every family (the sampled ones by default); full rotary for one
# family of each kind (plain; attention factor and seq_len-dependent with `slow`).
CASES = (
    [
        (f, 8)
        if f in ref.SAMPLED_FAMILIES
        else pytest.param(f, 8, marks=pytest.mark.slow)
        for f in ref.FAMILIES
    ]
    + [("plain", 16)]
    + [pytest.param(f, 16, marks=pytest.mark.slow) for f in ("yarn", "longrope")]
)


@pytest.mark.parametrize("family,rotary_dim", CASES)
@pytest.mark.parametrize(
    "layout", ["half", pytest.param("interleaved", marks=pytest.mark.slow)]
)
def test_shift_equals_rotation_at_shifted_positions(family, rotary_dim, layout):
    """Every family (the seq_len-dependent ones at one shared seq_len), both layouts,
    full and partial rotary, float32 and bfloat16 (dtype kept), every delta kind:
    rope_shift(apply_rope(k, p), d) == RoPE at p + d in float64, attention factor
    once; and a zero shift is the identity up to rounding (a unit rotation)."""
    config = ref.make_config(family, rotary_dim=rotary_dim, layout=layout)
    seq_len = SEQ_LEN if config.depends_on_seq_len else None
    inv_freq, attention = ref.frequencies(config, seq_len=seq_len)
    ulps = 16 if family == "dynamic_ntk" else 2  # as tests/test_rope.py's angle_ulps

    # One compiled rope_shift per dtype: vmapped over the deltas (as [D, B, S]),
    # applied to the rotated and the unrotated keys at once ([2, B, S, N, H]).
    deltas = np.stack([np.broadcast_to(d, POSITIONS.shape) for d in DELTAS.values()])

    @jax.jit
    def shifted(ks, deltas):
        shift = jax.vmap(lambda k, d: fp.rope_shift(k, d, config, seq_len=seq_len))
        outs = []
        for k in ks:
            both = jnp.stack([fp.apply_rope(k, POSITIONS, config, seq_len=seq_len), k])
            outs.append(
                shift(jnp.broadcast_to(both, (len(deltas), *both.shape)), deltas)
            )
        return outs

    ks = [normal((2, 5, 3, 16), dtype) for dtype in DTYPES]
    for k, got in zip(ks, shifted(ks, deltas), strict=True):
        assert got.dtype == k.dtype
        chex.assert_shape(got, (len(deltas), 2, *k.shape))
        for delta, (moved, unrotated) in zip(deltas, got, strict=True):
            truth, _ = ref.rope(k, POSITIONS + delta, inv_freq, attention, layout)
            reach = np.abs(POSITIONS) + np.abs(delta)
            assert_within_rotation_bound(
                moved, k, truth, reach, inv_freq, attention, layout, ulps
            )
            # Shifting unrotated keys is RoPE at delta with magnitude 1.
            truth, _ = ref.rope(k, delta, inv_freq, 1.0, layout)
            assert_within_rotation_bound(
                unrotated, k, truth, np.abs(delta), inv_freq, 1.0, layout, ulps
            )


def test_per_key_seq_len_of_dynamic_ntk():
    """Keys rotated with their own seq_len (transformers' decode policy) are shifted
    with the same per-key frequencies."""
    config = ref.make_config("dynamic_ntk")
    seq_lens = np.array([[100, 2048, 3000, 6000, 9000], [1, 5000, 5000, 2049, 40000]])
    k = normal((2, 5, 2, 16))
    delta = np.array([-3, 17, 0, 250, -1000])

    @jax.jit
    def shifted(k, delta, seq_lens):
        rotated = fp.apply_rope(k, POSITIONS, config, seq_len=seq_lens)
        return fp.rope_shift(rotated, delta, config, seq_len=seq_lens)

    got = shifted(k, delta, seq_lens)
    for b in range(2):
        for s in range(5):
            inv_freq, _ = ref.frequencies(config, seq_len=int(seq_lens[b, s]))
            truth, _ = ref.rope(
                k[b, s : s + 1],
                POSITIONS[b, s : s + 1] + delta[s],
                inv_freq,
                1.0,
                "half",
            )
            reach = np.abs(POSITIONS[b, s : s + 1]) + abs(delta[s])
            assert_within_rotation_bound(
                got[b, s : s + 1],
                k[b, s : s + 1],
                truth,
                reach,
                inv_freq,
                1.0,
                "half",
                16,
            )


def test_delta_values_never_recompile():
    config = fp.RopeConfig(
        head_dim=16,
        scaling=fp.YarnScaling(factor=4.0, original_max_position_embeddings=64),
    )

    @jax.jit
    @chex.assert_max_traces(n=2)  # one per delta shape: scalar and [S]
    def shift(k, delta):
        return fp.rope_shift(k, delta, config)

    k = normal((1, 5, 2, 16))
    for d in (1, -3, 1000):
        shift(k, jnp.int32(d))
    for d in ([0, 1, 2, 3, 4], [-9, 9, -9, 9, 0]):
        shift(k, jnp.array(d))
    assert shift._cache_size() == 2


def test_dynamic_seq_len_values_never_recompile():
    config = ref.make_config("longrope")

    @jax.jit
    @chex.assert_max_traces(n=1)
    def shift(k, delta, seq_len):
        return fp.rope_shift(k, delta, config, seq_len=seq_len)

    k = normal((5, 2, 16))
    for delta, seq_len in ((1, 100), (-5, 3000), (7, 2049)):
        shift(k, jnp.int32(delta), jnp.int32(seq_len))


K = jnp.ones((5, 2, 16))
PLAIN = fp.RopeConfig(head_dim=16)
ERRORS = [
    (
        "k of rank 2",
        dict(k=jnp.ones((5, 16))),
        ValueError,
        r"`k` must be \[..., L, N, H\]",
    ),
    (
        "k head_dim",
        dict(k=jnp.ones((5, 2, 8))),
        ValueError,
        r"H = config.head_dim \(16\)",
    ),
    (
        "integer k",
        dict(k=jnp.ones((5, 2, 16), jnp.int32)),
        TypeError,
        "`k` must be a floating",
    ),
    (
        "float delta",
        dict(delta=jnp.ones(5)),
        TypeError,
        "`delta` must be an integer array",
    ),
    (
        "python float delta",
        dict(delta=1.5),
        TypeError,
        "`delta` must be an integer array",
    ),
    ("bool delta", dict(delta=True), TypeError, "`delta` must be an integer array"),
    (
        "delta [1] for S=5",
        dict(delta=jnp.array([1])),
        ValueError,
        r"`delta` must be \[..., L\] with L = 5",
    ),
    (
        "delta too long",
        dict(delta=jnp.arange(6)),
        ValueError,
        r"`delta` must be \[..., L\] with L = 5",
    ),
    (
        "delta larger than k",
        dict(delta=jnp.zeros((3, 5), jnp.int32)),
        ValueError,
        "leading axes that broadcast",
    ),
    (
        "dynamic NTK without seq_len",
        dict(config=ref.make_config("dynamic_ntk")),
        ValueError,
        "`seq_len` is required to shift keys of DynamicNTKScaling",
    ),
    (
        "LongRoPE without seq_len",
        dict(config=ref.make_config("longrope")),
        ValueError,
        "`seq_len` is required to shift keys of LongRopeScaling",
    ),
    (
        "float seq_len",
        dict(config=ref.make_config("longrope"), seq_len=4096.0),
        TypeError,
        r"`seq_len` must be a positive int, .*got 4096.0 \(float\)",
    ),
    (
        "seq_len 0",
        dict(config=ref.make_config("longrope"), seq_len=0),
        ValueError,
        "`seq_len` must be a positive int",
    ),
    (
        "per-key seq_len of the wrong length",
        dict(config=ref.make_config("dynamic_ntk"), seq_len=jnp.array([10, 20])),
        ValueError,
        "A per-token `seq_len` must have the shape of delta",
    ),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c[0]) for c in ERRORS])
def test_errors(case):
    _, overrides, error, match = case
    args = dict(k=K, delta=jnp.int32(1), config=PLAIN, seq_len=None) | overrides
    with pytest.raises(error, match=match):
        fp.rope_shift(args["k"], args["delta"], args["config"], seq_len=args["seq_len"])
