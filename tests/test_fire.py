"""FIRE (Li et al. 2023): the float64 formula, the property it has (a function of
the progressively normalised distance: shift invariant below the threshold, the
farthest key pinned at f(1) beyond it) and the one it lacks (shift invariance past
the threshold, which testing.assert_shift_invariance catches), blockwise == dense,
finite gradients at distance 0, linen == nnx."""

import chex
import jax
import jax.numpy as jnp
import length_reference as ref
import numpy as np
import pytest
from flax import nnx
from helpers import normal

import flax_posenc as fp
from flax_posenc import linen as pl
from flax_posenc import nnx as pn
from flax_posenc import testing

W, N = 8, 3


def params(c=0.3, multiplier=1.0, seed=0):
    return fp.FireParams(
        c=jnp.array(c),
        threshold_multiplier=jnp.array(multiplier),
        hidden_kernel=normal((W,), seed=4 * seed),
        hidden_bias=normal((W,), seed=4 * seed + 1) * 0.1,
        output_kernel=normal((W, N), seed=4 * seed + 2),
        output_bias=normal((N,), seed=4 * seed + 3),
    )


def reference(p, q_pos, k_pos, init_threshold):
    return ref.fire(
        q_pos,
        k_pos,
        p.c,
        float(p.threshold_multiplier) * init_threshold,
        *(np.asarray(x, np.float64) for x in p[2:]),
    )


@pytest.mark.parametrize(
    "c, multiplier", [(0.3, 1.0), pytest.param(-0.1, -2.5, marks=pytest.mark.slow)]
)
def test_matches_the_paper_in_float64(c, multiplier):
    p = params(c, multiplier)
    q_pos = np.array([0, 1, 5, 16, 100, 4000])
    k_pos = np.array([0, 1, 5, 16, 99])
    got = jax.jit(fp.fire_bias, static_argnames="init_threshold")(
        q_pos, k_pos, p, init_threshold=16.0
    )
    assert got.shape == (N, 6, 5) and got.dtype == jnp.float32
    np.testing.assert_allclose(got, reference(p, q_pos, k_pos, 16.0), atol=2e-5)


def test_farthest_key_is_pinned_at_f_of_one_beyond_the_threshold():
    """u(i, 0) = 1 for every query past the threshold, whatever the length: the
    property that makes FIRE's bias length-independent at the far end."""
    p = params()
    q_pos = jnp.array([16, 100, 1000, 10**5])
    bias = fp.fire_bias(q_pos, jnp.array([0]), p, init_threshold=16.0)[:, :, 0]
    f_one = np.asarray(reference(p, [1], [0], 1.0)[:, 0, 0])  # u = log(1+c)/log(1+c)
    # up to eps = 1e-6 in the normaliser: u = 1 - eps / psi(i)
    np.testing.assert_allclose(bias, np.repeat(f_one[:, None], 4, axis=1), atol=1e-4)
    same = fp.fire_bias(q_pos, q_pos, p, init_threshold=16.0)
    diagonal = np.asarray(same)[:, np.arange(4), np.arange(4)]
    f_zero = reference(p, [0], [0], 1.0)[:, 0, 0]  # u = 0 on the diagonal
    np.testing.assert_allclose(
        diagonal, np.repeat(f_zero[:, None], 4, axis=1), atol=1e-5
    )


def shift_check(p, positions, offsets, init_threshold):
    testing.assert_bias_shift_invariance(
        fp.FireBias(p, init_threshold=init_threshold), positions, offsets
    )


def test_shift_invariant_below_the_threshold():
    shift_check(params(), np.arange(6), [3, 20], init_threshold=64.0)


def test_shift_invariance_helper_fails_beyond_the_threshold():
    with pytest.raises(AssertionError, match="depends on absolute positions"):
        shift_check(params(), np.arange(6) + 20, [50], init_threshold=4.0)


def reference_per_head(p, q_pos, k_pos, init_threshold):
    """The float64 formula, head by head (``c`` and the threshold [] or [N])."""
    c = np.broadcast_to(np.asarray(p.c, np.float64), (N,))
    multiplier = np.broadcast_to(np.asarray(p.threshold_multiplier, np.float64), (N,))
    w1, b1, w2, b2 = (np.asarray(x, np.float64) for x in p[2:])
    heads = [
        ref.fire(
            q_pos,
            k_pos,
            c[h],
            multiplier[h] * init_threshold,
            w1,
            b1,
            w2[:, h : h + 1],
            b2[h : h + 1],
        )
        for h in range(N)
    ]
    return np.concatenate(heads)


@pytest.mark.parametrize("per_head", [False, True], ids=["shared-u", "per-head-u"])
def test_derivatives_equal_float64_central_differences(per_head):
    """Forward mode (jvp) and reverse mode (grad) of FIRE's bias along a random
    direction in every parameter, through the MLP's own derivative rule (matmuls
    over the hidden units), equal central differences of the float64 formula; with
    c and the threshold shared by the heads (one u) or per head (u per head)."""
    p = params()
    if per_head:
        p = p._replace(
            c=jnp.array([0.3, 0.1, 0.5]),
            threshold_multiplier=jnp.array([1.0, 0.5, 2.5]),  # thresholds 8, 4, 20
        )
    q_pos, k_pos = np.array([0, 1, 5, 16, 40]), np.array([0, 2, 5, 9])
    rng = np.random.default_rng(7)
    cotangent = rng.standard_normal((N, 5, 4))
    direction = [rng.standard_normal(np.shape(x)) for x in p]

    def loss64(t):
        moved = fp.FireParams(
            *(
                np.asarray(x, np.float64) + t * d
                for x, d in zip(p, direction, strict=True)
            )
        )
        return np.sum(cotangent * reference_per_head(moved, q_pos, k_pos, 8.0))

    step = 1e-6
    want = (loss64(step) - loss64(-step)) / (2 * step)

    def loss(p):
        bias = fp.fire_bias(q_pos, k_pos, p, init_threshold=8.0)
        return jnp.sum(jnp.asarray(cotangent, jnp.float32) * bias)

    tangent = fp.FireParams(*(jnp.asarray(d, jnp.float32) for d in direction))
    _, forward = jax.jit(lambda p, t: jax.jvp(loss, (p,), (t,)))(p, tangent)
    grads = jax.jit(jax.grad(loss))(p)
    reverse = sum(jnp.vdot(g, t) for g, t in zip(grads, tangent, strict=True))
    np.testing.assert_allclose(forward, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(reverse, want, rtol=1e-4, atol=1e-4)


def test_gradients_finite_at_distance_zero():
    p = params()

    def loss(p):
        return jnp.sum(
            fp.fire_bias(jnp.arange(6), jnp.arange(6), p, init_threshold=3.0)
        )

    grads = jax.jit(jax.grad(loss))(p)
    chex.assert_tree_all_finite(grads)
    assert float(grads.c) != 0 and float(grads.threshold_multiplier) != 0


@pytest.mark.slow
def test_blockwise_equals_dense_and_no_retrace():
    q = normal((1, 32, N, 8))
    positions = jnp.arange(32)
    bias = fp.FireBias(params(), init_threshold=8.0)
    chex.clear_trace_counter()

    @jax.jit
    @chex.assert_max_traces(n=1)
    def run(q, positions, bias):
        return fp.blockwise_attention(
            q,
            q,
            q,
            q_positions=positions,
            bias=bias,
            causal=True,
            block_q=16,
            block_k=16,
        )

    for offset in (0, 100):
        got = run(q, positions + offset, bias)
        dense = fp.fire_bias(
            positions + offset, positions + offset, params(), init_threshold=8.0
        )
        mask = positions[None, :] <= positions[:, None]
        want = jax.nn.dot_product_attention(q, q, q, bias=dense[None], mask=mask)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def spread_params(width=16):
    """Hidden units whose breakpoints -b1/w1 spread over (0, 1), alternately rising
    and falling: near the diagonal a tile's u spans most of [0, 1] and most units
    change sign there, two blocks off 3 to 8 do, far from it one or two."""
    breakpoints = (jnp.arange(width) + 0.5) / width
    w1 = jnp.where(jnp.arange(width) % 2 == 0, 1.0, -1.0) * (1 + breakpoints)
    return params()._replace(
        hidden_kernel=w1,
        hidden_bias=-w1 * breakpoints,
        output_kernel=normal((width, N), seed=9),
    )


TILES = {  # (first query, first key) of 16 x 16 tiles, init_threshold 8
    "diagonal": (0, 0),
    "two blocks off the diagonal": (64, 32),
    "far": (200, 0),
    "far, second block": (200, 16),
}


def tile(name):
    q0, k0 = TILES[name]
    return jnp.arange(q0, q0 + 16), jnp.arange(k0, k0 + 16)


@jax.jit
def evaluate_tile_cases(p, q_pos, k_pos):
    """FireBias.tile_cases: (index, every case's bias stacked [cases, N, l, s])."""
    index, cases = fp.FireBias(p, init_threshold=8.0).tile_cases(q_pos, k_pos)
    return index, jnp.stack([case(q_pos, k_pos) for case in cases])


@pytest.mark.parametrize(
    "name",
    [
        name
        if name != "far, second block"
        else pytest.param(name, marks=pytest.mark.slow)
        for name in TILES
    ],
)
def test_tile_cases_pick_an_exact_case(name):
    """FireBias.tile_cases: the picked case and the full MLP (the last) both equal
    the float64 formula on the tile; the picked one is the smallest window (2 or 8
    units) that holds the units that change sign, the full MLP when none does.
    Kills a unit folded with the wrong sign, an inverted index, a window that drops
    a unit it should keep."""
    p = spread_params()
    q_pos, k_pos = tile(name)
    index, cases = evaluate_tile_cases(p, q_pos, k_pos)
    want = reference(p, q_pos, k_pos, 8.0)
    np.testing.assert_allclose(cases[int(index)], want, atol=2e-5)
    np.testing.assert_allclose(cases[-1], want, atol=2e-5)
    identity = dict(  # f(u) = u
        hidden_kernel=jnp.ones(1),
        hidden_bias=jnp.zeros(1),
        output_kernel=jnp.ones((1, 1)),
        output_bias=jnp.zeros(1),
    )
    u = reference(params()._replace(**identity), q_pos, k_pos, 8.0)
    t = -np.asarray(p.hidden_bias) / np.asarray(p.hidden_kernel)
    changing = np.sum((t > u.min()) & (t < u.max()))
    assert len(cases) == 3
    assert int(index) == int(changing > 2) + int(changing > 8), changing


def test_tile_cases_keep_a_nan_parameter():
    """A NaN in the output weights of a unit (1, falling) inactive over the tile
    makes the full MLP NaN (0 * NaN); the windowed cases, which drop that unit,
    must be NaN too."""
    p = spread_params()
    p = p._replace(output_kernel=p.output_kernel.at[1, 1].set(jnp.nan))
    index, cases = evaluate_tile_cases(p, *tile("far"))
    assert int(index) == 0
    assert np.isnan(cases[:, 1]).all()


def blockwise_fire(q, p, positions):
    return fp.blockwise_attention(
        q,
        q,
        q,
        q_positions=positions,
        bias=fp.FireBias(p, init_threshold=8.0),
        causal=True,
        block_q=16,
        block_k=16,
    )


def dense_fire(q, p, positions):
    mask = positions[None, :] <= positions[:, None]
    b = fp.fire_bias(positions, positions, p, init_threshold=8.0)
    return jax.nn.dot_product_attention(q, q, q, bias=b[None], mask=mask)


def test_blockwise_with_every_tile_case_equals_dense():
    """Causal blockwise attention over 16 x 16 tiles whose FIRE bias takes a window
    of 2 units on some tiles, of 8 on others and the full MLP on the rest equals
    dense attention with fire_bias."""
    p = spread_params()
    positions = jnp.arange(224)
    starts = range(0, 224, 16)
    index = jax.jit(lambda p, q_pos, k_pos: evaluate_tile_cases(p, q_pos, k_pos)[0])
    cases = {
        int(index(p, positions[i : i + 16], positions[j : j + 16]))
        for i in starts
        for j in starts
        if j <= i
    }
    assert cases == {0, 1, 2}
    q = normal((1, 224, N, 8), seed=3)
    got = jax.jit(blockwise_fire)(q, p, positions)
    want = jax.jit(dense_fire)(q, p, positions)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


@pytest.mark.slow
def test_blockwise_with_every_tile_case_has_the_dense_gradient():
    """The same attention's gradient w.r.t. q and FIRE's parameters (the windowed
    cases differentiate through the MLP's own JVP rule) equals dense attention's."""
    p = spread_params()
    positions = jnp.arange(224)
    q = normal((1, 224, N, 8), seed=3)
    cotangent = normal((1, 224, N, 8), seed=5)

    def grads(attend):
        loss = lambda q, p: jnp.sum(attend(q, p, positions) * cotangent)
        return jax.jit(jax.grad(loss, argnums=(0, 1)))(q, p)

    (got_q, got_p), (want_q, want_p) = grads(blockwise_fire), grads(dense_fire)
    np.testing.assert_allclose(got_q, want_q, rtol=1e-4, atol=1e-5)
    for name, g, w in zip(fp.FireParams._fields, got_p, want_p, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=name)


def test_linen_equals_nnx_with_copied_parameters():
    positions = jnp.arange(7)[None]
    linen_module = pl.FIRE(N, mlp_width=W, init_threshold=4.0)
    variables = linen_module.init(jax.random.key(0), positions)
    assert set(variables["params"]) == set(fp.FireParams._fields)
    nnx_module = pn.FIRE(N, mlp_width=W, init_threshold=4.0, rngs=nnx.Rngs(3))
    for name, value in variables["params"].items():
        getattr(nnx_module, name)[...] = value
    got_nnx = nnx.jit(lambda m, p: m(p))(nnx_module, positions)
    got_linen = jax.jit(linen_module.apply)(variables, positions)
    np.testing.assert_allclose(got_linen, got_nnx, rtol=1e-6, atol=1e-7)
    assert got_nnx.shape == (1, N, 7, 7)


@pytest.mark.slow
def test_bfloat16_parameters():
    module = pn.FIRE(2, param_dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    out = module(jnp.arange(5))
    assert out.dtype == jnp.bfloat16
    chex.assert_tree_all_finite(out)
