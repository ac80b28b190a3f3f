"""Bad input to FIRE, Kerple and CoPE fails at trace time with a ValueError or
TypeError naming the argument, what was expected and what was given (one row per
plausible mistake)."""

import jax.numpy as jnp
import pytest

import flax_posenc as fp

P = jnp.arange(4)
R = jnp.zeros(2)
FIRE = fp.FireParams(
    jnp.array(0.1),
    jnp.array(1.0),
    jnp.ones(4),
    jnp.zeros(4),
    jnp.ones((4, 2)),
    jnp.zeros(2),
)
Q = jnp.ones((4, 2, 8))
E = jnp.ones((5, 8))

ROWS = [
    # Kerple
    (
        lambda: fp.kerple_bias(P, P, R, R, kernel="cubic"),
        ValueError,
        r"`kernel` must be one of 'log', 'power', got 'cubic'",
    ),
    (
        lambda: fp.kerple_bias(P, P, R, jnp.zeros(3)),
        ValueError,
        r"both be \[N\], got shapes \(2,\) and \(3,\)",
    ),
    (
        lambda: fp.kerple_bias(P, P, jnp.zeros((2, 1)), R),
        ValueError,
        r"`r1_unconstrained` must be \[N\].*\(2, 1\)",
    ),
    (
        lambda: fp.kerple_bias(P, P, jnp.zeros(2, int), R),
        TypeError,
        r"`r1_unconstrained` must be a floating-point array.*astype",
    ),
    (
        lambda: fp.kerple_bias(P * 1.0, P, R, R),
        TypeError,
        r"`q_positions` must be an integer array",
    ),
    (lambda: fp.KerpleBias(R, R, "quadratic"), ValueError, "`kernel`"),
    # FIRE
    (
        lambda: fp.fire_bias(P, P, FIRE._asdict()),
        TypeError,
        r"`params` must be a flax_posenc.FireParams, got dict.*Hint",
    ),
    (
        lambda: fp.fire_bias(P, P, FIRE._replace(hidden_bias=jnp.zeros(3))),
        ValueError,
        r"`params.hidden_bias` must have shape \(4,\).*got \(3,\)",
    ),
    (
        lambda: fp.fire_bias(P, P, FIRE._replace(output_kernel=jnp.ones(4))),
        ValueError,
        r"`params.output_kernel` must be \[W, N\]",
    ),
    (
        lambda: fp.fire_bias(P, P, FIRE._replace(c=jnp.ones(3))),
        ValueError,
        r"`params.c` must be a scalar \[\] or \[N\]",
    ),
    (
        lambda: fp.fire_bias(P, P, FIRE, init_threshold=0.0),
        ValueError,
        r"`init_threshold` must be a finite number > 0, got 0.0",
    ),
    (lambda: fp.FireBias(FIRE, eps=-1.0), ValueError, "`eps`"),
    # CoPE
    (
        lambda: fp.cope_bias(Q, Q, jnp.ones((5, 4)), q_positions=P, k_positions=P),
        ValueError,
        r"`pos_emb` must be \[P, H\] with H = 8, got shape \(5, 4\)",
    ),
    (
        lambda: fp.cope_bias(Q, Q[..., :4], E, q_positions=P, k_positions=P),
        ValueError,
        r"`k` must be \[..., S, K, H\]",
    ),
    (
        lambda: fp.cope_bias(Q[0], Q, E, q_positions=P, k_positions=P),
        ValueError,
        r"`q` must be \[..., L, N, H\]",
    ),
    (
        lambda: fp.cope_bias(Q, Q, E, q_positions=P * 1.0, k_positions=P),
        TypeError,
        "`q_positions`",
    ),
    (
        lambda: fp.cope_bias(Q, Q, E, q_positions=P, k_positions=P, scale=0.0),
        ValueError,
        "`scale`",
    ),
    (
        lambda: fp.cope_bias(Q.astype(jnp.int32), Q, E, q_positions=P, k_positions=P),
        TypeError,
        "`q` must be a floating-point array",
    ),
]


@pytest.mark.parametrize("call, error, match", ROWS)
def test_errors_name_argument_expected_and_given(call, error, match):
    with pytest.raises(error, match=match):
        call()
