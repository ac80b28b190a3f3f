"""Public functions called eagerly run one compiled program per new shape (RoPE: one
for the tables, one for the rotation). Op by op, each of their operations compiled
on its own: 5 to 30 programs on a first call, and as many dispatches on every later
one (3 to 7 times slower).

Positions may be numpy (the edge widens them on the host and places them as they
are); the tables and parameters here are device arrays: ``jnp.asarray`` of a numpy
array compiles a copy program of its own (JAX's ``stage``)."""

import jax
import numpy as np
import pytest
from jax import monitoring

import flax_posenc as fp

_COMPILES: list[float] = []


def _listener(event: str, duration: float, **kwargs) -> None:
    if event == "/jax/core/compile/backend_compile_duration":
        _COMPILES.append(duration)


monitoring.register_event_duration_secs_listener(_listener)

HEADS = 3
F32 = np.float32
Q, K = np.arange(37), np.arange(41)  # lengths no other test module uses
X = jax.device_put(np.ones((37, HEADS, 8), F32))
POS_EMB = jax.device_put(np.ones((5, 8), F32))
ONES = jax.device_put(np.ones(HEADS, F32))
TABLE = jax.device_put(np.ones((64, HEADS), F32))
ROPE = fp.RopeConfig(head_dim=8)
EXACT = fp.RopeConfig(head_dim=8, angle_precision="exact")
FIRE = jax.device_put(
    fp.FireParams(
        c=np.full(HEADS, 0.1, F32),
        threshold_multiplier=np.ones(HEADS, F32),
        hidden_kernel=np.linspace(-1, 1, 4, dtype=F32),
        hidden_bias=np.zeros(4, F32),
        output_kernel=np.ones((4, HEADS), F32),
        output_bias=np.zeros(HEADS, F32),
    )
)

CALLS = {
    "alibi_bias": (1, lambda: fp.alibi_bias(Q, K, HEADS)),
    "relative_position_bias": (1, lambda: fp.relative_position_bias(TABLE, Q, K)),
    "kerple_bias": (1, lambda: fp.kerple_bias(Q, K, ONES, ONES)),
    "kerple_bias power": (1, lambda: fp.kerple_bias(Q, K, ONES, ONES, kernel="power")),
    "fire_bias": (1, lambda: fp.fire_bias(Q, K, FIRE)),
    "cope_bias": (1, lambda: fp.cope_bias(X, X, POS_EMB, q_positions=Q, k_positions=Q)),
    "learned_embedding_lookup": (1, lambda: fp.learned_embedding_lookup(TABLE, Q)),
    "rope_cos_sin": (1, lambda: fp.rope_cos_sin(Q, ROPE)),
    "rope_cos_sin exact": (1, lambda: fp.rope_cos_sin(Q, EXACT)),
    "apply_rope": (2, lambda: fp.apply_rope(X, Q, ROPE)),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_an_eager_call_compiles_its_programs_once(name):
    programs, call = CALLS[name]
    jax.clear_caches()
    _COMPILES.clear()
    first = call()
    assert len(_COMPILES) == programs, f"{name}: {len(_COMPILES)} programs"
    _COMPILES.clear()
    np.testing.assert_array_equal(call(), first)
    assert not _COMPILES  # a second call with the same shapes compiles nothing
