"""The CPU sin/cos of ``flax_posenc._core.cpu`` against float64 truth, and both forms of
the ``flax_posenc._core.sincos`` switch at special values.

Bound (issue #11): against float64 ``sin``/``cos`` of the same float32 angle ``x``,
``|error| <= 2 ulp(truth) + |x| * 2^-24``, over every float32 angle the library can
form (integer positions of any width times float32 frequencies: every finite
float32), large-angle end included.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from branches import BRANCHES, run_branch
from cpu_vector_width import VECTOR_WIDTH_PARAMS, run_at_width
from jax_compat import enable_x64

from flax_posenc._core import cpu as _cpu
from flax_posenc._core import sincos as _sincos
from flax_posenc._core.sincos import sin_cos

_MAX = float(np.finfo(np.float32).max)


def _bound_ratio(got: np.ndarray, truth: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Error over its allowance: <= 1 means within the bound."""
    ulp = np.spacing(np.abs(truth).astype(np.float32)).astype(np.float64)
    allowance = 2 * ulp + np.abs(x.astype(np.float64)) * 2.0**-24
    return np.abs(got.astype(np.float64) - truth) / allowance


def _angles() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    normal = rng.integers(0x00800000, 0x7F7FFFFF, 1 << 20, dtype=np.uint32)
    decades = [
        rng.uniform(lo, hi, 1 << 18).astype(np.float32)
        for lo, hi in [(0, 1), (1, 8), (8, 2**12), (2**12, 2**21), (2**21, 2**26)]
    ]
    # Where the reduction cancels most: float32 neighbours of k * pi/2.
    k = np.arange(1, 1 << 18, dtype=np.float64)
    near = (k * np.pi / 2).astype(np.float32).view(np.int32)
    near = np.concatenate([near + d for d in range(-2, 3)]).view(np.float32)
    large = np.exp(rng.uniform(np.log(2.0**26), np.log(_MAX), 1 << 16))
    special = np.float32([0.0, 1.0, np.pi / 4, 2.0**21, 2.0**24, 2.0**31, _MAX])
    return {
        "random float32 bit patterns": normal.view(np.float32),
        "uniform over [0, 2^26)": np.concatenate(decades),
        "neighbours of k pi/2": near,
        "integer positions times 1": np.arange(0, 1 << 24, 61, dtype=np.float32),
        "log-uniform over [2^26, max]": large.astype(np.float32),
        "special": special,
    }


@pytest.mark.parametrize("vector_width", VECTOR_WIDTH_PARAMS)
@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("name", list(_angles()))
def test_sin_cos_within_bound(name, sign, vector_width):
    x = sign * _angles()[name]
    sin, cos = run_at_width(_cpu.sin_cos, jnp.asarray(x), vector_width=vector_width)
    x64 = x.astype(np.float64)
    for got, truth in ((sin, np.sin(x64)), (cos, np.cos(x64))):
        ratio = _bound_ratio(np.asarray(got), truth, x)
        worst = int(np.argmax(ratio))
        assert ratio[worst] <= 1.0, (name, x[worst], got[worst], truth[worst])


@pytest.mark.parametrize("vector_width", VECTOR_WIDTH_PARAMS)
@pytest.mark.parametrize(
    "turns", [0, 1, *(pytest.param(t, marks=pytest.mark.slow) for t in (-1, 2, 3, 5))]
)
def test_sin_quarter_turns_within_bound(turns, vector_width):
    x = np.concatenate(list(_angles().values()))
    x = np.concatenate([x, -x])
    got = run_at_width(
        _cpu.sin_quarter_turns,
        jnp.asarray(x),
        jnp.int32(turns),
        vector_width=vector_width,
    )
    # sin(x + t pi/2) of the float32 x, exactly: rotate sin/cos by t quarter turns.
    x64 = x.astype(np.float64)
    truth = [np.sin(x64), np.cos(x64), -np.sin(x64), -np.cos(x64)][turns % 4]
    assert _bound_ratio(np.asarray(got), truth, x).max() <= 1.0


# One binade by default (cos over [2^24, 2^25)); every one, both signs, under `slow`.
@pytest.mark.parametrize("sign", [1, pytest.param(-1, marks=pytest.mark.slow)])
@pytest.mark.parametrize("turns", [pytest.param(0, marks=pytest.mark.slow), 1])
@pytest.mark.parametrize(
    "exponent", [*(pytest.param(e, marks=pytest.mark.slow) for e in (22, 23, 25)), 24]
)
def test_sin_quarter_turns_every_float32_where_the_bound_is_tightest(
    exponent, turns, sign
):
    """All 2^23 float32 in [2^e, 2^(e+1)), and their negatives.

    Where x/pi rounds to a neighbour of the half-turn count, the clamp's error comes
    within 0.95 of the bound. Below 2^22 it stays under half of it; from 2^26 on,
    |x| 2^-24 >= 4 allows any value in [-1, 1].
    """
    first = np.float32(2.0**exponent).view(np.uint32)
    x = sign * (first + np.arange(1 << 23, dtype=np.uint32)).view(np.float32)
    got = jax.jit(_cpu.sin_quarter_turns)(jnp.asarray(x), jnp.int32(turns))
    x64 = x.astype(np.float64)
    truth = np.cos(x64) if turns else np.sin(x64)
    assert _bound_ratio(np.asarray(got), truth, x).max() <= 1.0


@pytest.mark.parametrize(
    "sin_cos_quadrant",
    [_cpu.sin_cos_quadrant, _sincos._sin_cos_quadrant],
    ids=["cpu", "default"],
)
def test_sin_cos_quadrant_both_forms_within_bound(sin_cos_quadrant):
    """Each form called directly: sin and cos of ``r + q pi/2``, every quadrant."""
    r = np.linspace(-np.pi / 4, np.pi / 4, 4097).astype(np.float32)
    q = np.arange(-8, 8, dtype=np.int32)[:, None]
    sin, cos = jax.jit(sin_cos_quadrant)(jnp.asarray(r), jnp.asarray(q))
    s, c = np.sin(r.astype(np.float64)), np.cos(r.astype(np.float64))
    quarter = q % 4  # each quarter turn maps (sin, cos) to (cos, -sin)
    true_sin = np.choose(quarter, [s, c, -s, -c])
    true_cos = np.choose(quarter, [c, -s, -c, s])
    for got, truth in ((sin, true_sin), (cos, true_cos)):
        ulp = np.spacing(np.abs(truth).astype(np.float32)).astype(np.float64)
        assert np.all(np.abs(np.asarray(got, np.float64) - truth) <= 2 * ulp)


@pytest.mark.parametrize("branch", BRANCHES)
def test_sin_cos_special_values(branch):
    x = jnp.float32([0.0, -0.0, jnp.inf, -jnp.inf, jnp.nan])
    sin, cos = run_branch(sin_cos, x, branch=branch)
    assert np.array_equal(np.signbit(sin[:2]), [False, True])  # sin(-0) = -0
    np.testing.assert_array_equal(cos[:2], [1.0, 1.0])
    assert np.isnan(sin[2:]).all() and np.isnan(cos[2:]).all()


@pytest.mark.parametrize("branch", BRANCHES)
def test_sin_cos_subnormal_angles(branch):
    x = np.float32([1e-45, 1e-40, 1.1754942e-38])
    sin, cos = run_branch(sin_cos, jnp.asarray(x), branch=branch)
    np.testing.assert_allclose(np.asarray(sin), x, rtol=0, atol=2.0**-126)
    np.testing.assert_array_equal(cos, [1.0, 1.0, 1.0])


def test_cpu_program_has_no_libm_calls():
    """On CPU the table is multiply/add; XLA's sine/cosine are not lowered."""
    hlo = jax.jit(sin_cos).lower(jnp.zeros((8,), jnp.float32)).as_text()
    assert "sine" not in hlo and "cosine" not in hlo


def test_accelerators_keep_xla_sin_cos():
    from jax import export  # a submodule to import explicitly before jax 0.8

    exported = export.export(jax.jit(sin_cos), platforms=["cuda"])(
        jax.ShapeDtypeStruct((8,), jnp.float32)
    )
    text = exported.mlir_module()
    assert "sine" in text and "cosine" in text
    assert "round_nearest_even" not in text


@pytest.mark.parametrize("branch", BRANCHES)
def test_sin_cos_under_x64_stays_float32(branch):
    x = np.float32([0.5, 3.0, 1e6])
    with enable_x64():
        sin, cos = run_branch(sin_cos, jnp.asarray(x), branch=branch)
        turned = jax.jit(_cpu.sin_quarter_turns)(jnp.asarray(x), jnp.int32(1))
    assert sin.dtype == cos.dtype == turned.dtype == jnp.float32
    for got in (cos, turned):
        np.testing.assert_allclose(
            np.asarray(got), np.cos(x.astype(np.float64)), atol=1e-6
        )
