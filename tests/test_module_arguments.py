"""Every argument of every linen and nnx module reaches something.

For each constructor and call argument of each module in ``flax_posenc.linen`` and
``flax_posenc.nnx`` (found by ``dataclasses.fields`` / ``inspect.signature``, so a new
argument without a row in ``CASES`` fails ``test_every_argument_has_a_case``), one
row shows that it either changes the output (``CHANGES``) or is validated: a bad value
raises a ``ValueError``/``TypeError`` naming it (``REJECTS``). The same rows run in
both APIs, so an argument one of them stores and never reads is caught.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import pydoc
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from helpers import normal

import flax_posenc as fp
from flax_posenc import linen as plinen
from flax_posenc import nnx as pnnx

APIS = {"linen": (plinen, nn.Module), "nnx": (pnnx, nnx.Module)}
CHANGES, REJECTS = "changes", "rejects"


def modules(api: str) -> dict[str, type]:
    """The module classes ``flax_posenc.<api>`` defines."""
    namespace, base = APIS[api]
    return {
        name: value
        for name, value in vars(namespace).items()
        if inspect.isclass(value)
        and issubclass(value, base)
        and value.__module__ == namespace.__name__
    }


def constructor_parameters(api: str, cls: type) -> dict[str, Any]:
    """Constructor argument name -> default (``inspect.Parameter.empty`` if none)."""
    if api == "linen":
        return {
            f.name: inspect.Parameter.empty
            if f.default is dataclasses.MISSING
            else f.default
            for f in dataclasses.fields(cls)
            if f.name not in ("parent", "name")
        }
    parameters = inspect.signature(cls).parameters  # what help(cls) shows
    return {n: p.default for n, p in parameters.items() if n != "rngs"}


def call_parameters(cls: type) -> dict[str, Any]:
    parameters = inspect.signature(cls.__call__).parameters
    return {n: p.default for n, p in parameters.items() if n != "self"}


EMBEDDINGS = normal((2, 8, 16))  # [B, L, D]
Q, K = (
    normal((2, 8, 4, 8), seed=1),
    normal((2, 8, 2, 8), seed=2),
)  # [B, L, N, H], 2 k heads
ROPE = fp.RopeConfig(head_dim=8)
DYNAMIC_NTK = fp.RopeConfig(
    head_dim=8,
    scaling=fp.DynamicNTKScaling(factor=4.0, original_max_position_embeddings=16),
)
SPREAD = jnp.arange(0, 128, 8)[None]  # [B=1, L=16]: distances 0..120 (T5 buckets)

# The baseline arguments of each module: (constructor, call).
BASELINES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "SinusoidalPositionalEncoding": ({}, dict(embeddings=EMBEDDINGS)),
    "LearnedPositionalEmbedding": (
        dict(max_len=16, features=16),
        dict(embeddings=EMBEDDINGS),
    ),
    "RotaryEmbedding": (dict(config=ROPE), dict(q=Q, k=K, positions=jnp.arange(8))),
    "ALiBi": (dict(num_heads=4), dict(q_positions=jnp.arange(6))),
    "RelativePositionBias": (dict(num_heads=4), dict(q_positions=SPREAD)),
    "Kerple": (dict(num_heads=4), dict(q_positions=jnp.arange(6))),
    "FIRE": (dict(num_heads=4, init_threshold=8.0), dict(q_positions=jnp.arange(6))),
    "CoPE": (
        dict(
            head_dim=8, num_positions=9, embedding_init=jax.nn.initializers.normal(1.0)
        ),
        dict(q=Q, k=K, q_positions=jnp.arange(8)),
    ),
}


class Case(NamedTuple):
    """``argument=value`` either changes the outcome or is rejected.

    ``init`` / ``call`` override the baseline in both runs (e.g. positions out of a
    learned table's range, for ``out_of_range``).
    """

    module: str
    argument: str
    value: Any
    kind: str
    init: Mapping[str, Any] = MappingProxyType({})
    call: Mapping[str, Any] = MappingProxyType({})


FLOAT_POSITIONS = jnp.arange(8.0)
CASES = [
    # SinusoidalPositionalEncoding
    Case("SinusoidalPositionalEncoding", "base", 100.0, CHANGES),
    Case("SinusoidalPositionalEncoding", "base", -1.0, REJECTS),
    Case("SinusoidalPositionalEncoding", "layout", "half", CHANGES),
    Case("SinusoidalPositionalEncoding", "layout", "diagonal", REJECTS),
    Case("SinusoidalPositionalEncoding", "spacing", "tensor2tensor", CHANGES),
    Case("SinusoidalPositionalEncoding", "spacing", "log", REJECTS),
    Case(
        "SinusoidalPositionalEncoding",
        "angle_precision",
        "exact",
        CHANGES,
        call=dict(positions=jnp.arange(8) + 10**6),
    ),
    Case("SinusoidalPositionalEncoding", "angle_precision", "float64", REJECTS),
    Case("SinusoidalPositionalEncoding", "dtype", jnp.bfloat16, CHANGES),
    Case("SinusoidalPositionalEncoding", "embeddings", EMBEDDINGS[0, 0], REJECTS),
    Case("SinusoidalPositionalEncoding", "positions", jnp.arange(8) + 3, CHANGES),
    Case("SinusoidalPositionalEncoding", "positions", FLOAT_POSITIONS, REJECTS),
    # LearnedPositionalEmbedding
    Case("LearnedPositionalEmbedding", "max_len", 0, REJECTS),
    Case("LearnedPositionalEmbedding", "max_len", 4, REJECTS),  # < L = 8
    Case("LearnedPositionalEmbedding", "features", 8, REJECTS),
    Case("LearnedPositionalEmbedding", "dtype", jnp.bfloat16, CHANGES),
    Case("LearnedPositionalEmbedding", "param_dtype", jnp.bfloat16, CHANGES),
    Case(
        "LearnedPositionalEmbedding",
        "embedding_init",
        jax.nn.initializers.ones,
        CHANGES,
    ),
    Case(
        "LearnedPositionalEmbedding",
        "out_of_range",
        "clip",
        CHANGES,
        call=dict(positions=jnp.arange(8) + 12),  # 12..19, past max_len = 16
    ),
    Case("LearnedPositionalEmbedding", "out_of_range", "wrap", REJECTS),
    Case("LearnedPositionalEmbedding", "embeddings", EMBEDDINGS[0, 0], REJECTS),
    Case("LearnedPositionalEmbedding", "positions", jnp.arange(8) + 3, CHANGES),
    Case("LearnedPositionalEmbedding", "positions", FLOAT_POSITIONS, REJECTS),
    # RotaryEmbedding
    Case("RotaryEmbedding", "config", fp.RopeConfig(head_dim=8, theta=100.0), CHANGES),
    Case("RotaryEmbedding", "q", Q[..., :6], REJECTS),
    Case("RotaryEmbedding", "k", K[..., :6], REJECTS),
    Case("RotaryEmbedding", "positions", jnp.arange(8) + 1, CHANGES),
    Case("RotaryEmbedding", "positions", FLOAT_POSITIONS, REJECTS),
    Case("RotaryEmbedding", "k_positions", jnp.arange(8) + 2, CHANGES),
    Case("RotaryEmbedding", "k_positions", FLOAT_POSITIONS, REJECTS),
    Case(
        "RotaryEmbedding",
        "seq_len",
        4096,  # > original 16: dynamic NTK raises theta
        CHANGES,
        init=dict(config=DYNAMIC_NTK),
    ),
    Case(
        "RotaryEmbedding",
        "k_seq_len",
        4096,  # k's alone: q keeps max(positions) + 1 = 8 < 16
        CHANGES,
        init=dict(config=DYNAMIC_NTK),
    ),
    # ALiBi
    Case("ALiBi", "num_heads", 8, CHANGES),
    Case("ALiBi", "num_heads", 0, REJECTS),
    Case("ALiBi", "dtype", jnp.bfloat16, CHANGES),
    Case(
        "ALiBi",
        "q_positions",
        jnp.arange(6) + 3,
        CHANGES,
        call=dict(k_positions=jnp.arange(6)),
    ),
    Case("ALiBi", "q_positions", jnp.arange(6.0), REJECTS),
    Case("ALiBi", "k_positions", jnp.arange(6) + 2, CHANGES),
    # RelativePositionBias
    Case("RelativePositionBias", "num_heads", 8, CHANGES),
    Case("RelativePositionBias", "num_heads", 0, REJECTS),
    Case("RelativePositionBias", "num_buckets", 8, CHANGES),
    Case("RelativePositionBias", "num_buckets", 0, REJECTS),
    Case("RelativePositionBias", "max_distance", 32, CHANGES),
    Case("RelativePositionBias", "max_distance", -1, REJECTS),
    Case("RelativePositionBias", "bidirectional", False, CHANGES),
    Case("RelativePositionBias", "bidirectional", "yes", REJECTS),
    Case("RelativePositionBias", "dtype", jnp.bfloat16, CHANGES),
    Case("RelativePositionBias", "param_dtype", jnp.bfloat16, CHANGES),
    Case("RelativePositionBias", "embedding_init", jax.nn.initializers.ones, CHANGES),
    Case(
        "RelativePositionBias",
        "q_positions",
        SPREAD + 3,
        CHANGES,
        call=dict(k_positions=SPREAD),
    ),
    Case("RelativePositionBias", "q_positions", SPREAD * 1.0, REJECTS),
    Case("RelativePositionBias", "k_positions", SPREAD + 5, CHANGES),
    # Kerple
    Case("Kerple", "num_heads", 8, CHANGES),
    Case("Kerple", "num_heads", 0, REJECTS),
    Case("Kerple", "kernel", "power", CHANGES),
    Case("Kerple", "kernel", "cubic", REJECTS),
    Case("Kerple", "dtype", jnp.bfloat16, CHANGES),
    Case("Kerple", "param_dtype", jnp.bfloat16, CHANGES),
    Case("Kerple", "r1_init", jax.nn.initializers.ones, CHANGES),
    Case("Kerple", "r2_init", jax.nn.initializers.ones, CHANGES),
    Case(
        "Kerple",
        "q_positions",
        jnp.arange(6) + 3,
        CHANGES,
        call=dict(k_positions=jnp.arange(6)),
    ),
    Case("Kerple", "q_positions", jnp.arange(6.0), REJECTS),
    Case("Kerple", "k_positions", jnp.arange(6) + 2, CHANGES),
    # FIRE
    Case("FIRE", "num_heads", 8, CHANGES),
    Case("FIRE", "num_heads", 0, REJECTS),
    Case("FIRE", "mlp_width", 16, CHANGES),
    Case("FIRE", "mlp_width", 0, REJECTS),
    Case("FIRE", "init_threshold", 2.0, CHANGES),  # positions 0..5 pass it
    Case("FIRE", "init_threshold", -1.0, REJECTS),
    Case("FIRE", "eps", 0.5, CHANGES),
    Case("FIRE", "eps", 0.0, REJECTS),
    Case("FIRE", "dtype", jnp.bfloat16, CHANGES),
    Case("FIRE", "param_dtype", jnp.bfloat16, CHANGES),
    Case(
        "FIRE",
        "q_positions",
        jnp.arange(6) + 3,
        CHANGES,
        call=dict(k_positions=jnp.arange(6)),
    ),
    Case("FIRE", "q_positions", jnp.arange(6.0), REJECTS),
    Case("FIRE", "k_positions", jnp.arange(6) + 2, CHANGES),
    # CoPE
    Case("CoPE", "head_dim", 0, REJECTS),
    Case("CoPE", "num_positions", 2, CHANGES),  # counts clamp at 1
    Case("CoPE", "num_positions", 0, REJECTS),
    Case("CoPE", "scale", 2.0, CHANGES),
    Case("CoPE", "scale", -1.0, REJECTS),
    Case("CoPE", "dtype", jnp.bfloat16, CHANGES),
    Case("CoPE", "param_dtype", jnp.bfloat16, CHANGES),
    Case("CoPE", "embedding_init", jax.nn.initializers.ones, CHANGES),
    Case("CoPE", "q", Q * 2, CHANGES),
    Case("CoPE", "q", Q[..., :6], REJECTS),
    Case("CoPE", "k", K * 2, CHANGES),
    Case("CoPE", "k", K.astype(jnp.int32), REJECTS),
    Case(
        "CoPE",
        "q_positions",
        jnp.arange(8) + 3,
        CHANGES,
        call=dict(k_positions=jnp.arange(8)),
    ),
    Case("CoPE", "q_positions", FLOAT_POSITIONS, REJECTS),
    Case("CoPE", "k_positions", jnp.arange(8) * 2, CHANGES),
    Case("CoPE", "mask", jnp.eye(8, dtype=bool), CHANGES),
]


class Outcome(NamedTuple):
    """The output leaves of one construction and call, or the error they raised."""

    leaves: list[np.ndarray] | None
    error: Exception | None


def run(api: str, name: str, init: dict[str, Any], call: dict[str, Any]) -> Outcome:
    """Builds module ``name`` of ``api`` with ``init`` and calls it with ``call``."""
    cls = modules(api)[name]
    try:
        if api == "linen":
            module = cls(**init)
            variables = module.init(jax.random.key(0), **call)
            out = module.apply(variables, **call)
        else:
            if "rngs" in inspect.signature(cls.__init__).parameters:
                init = dict(init, rngs=nnx.Rngs(0))
            out = cls(**init)(**call)
    except (ValueError, TypeError) as error:
        return Outcome(None, error)
    return Outcome([np.asarray(leaf) for leaf in jax.tree.leaves(out)], None)


@functools.cache
def baseline_outcome(api: str, name: str) -> Outcome:
    """The outcome of module ``name``'s ``BASELINES`` row, computed once per run."""
    init, call = BASELINES[name]
    return run(api, name, init, call)


def differ(a: Outcome, b: Outcome) -> bool:
    """Whether two outcomes differ: one raised, or a leaf's shape, dtype or value."""
    if (a.error is None) != (b.error is None):
        return True
    assert a.leaves is not None and b.leaves is not None, (a.error, b.error)
    return len(a.leaves) != len(b.leaves) or any(
        x.shape != y.shape
        or x.dtype != y.dtype
        or not np.array_equal(x, y, equal_nan=True)
        for x, y in zip(a.leaves, b.leaves, strict=False)
    )


def case_id(case: Case) -> str:
    return f"{case.module}-{case.argument}={case.kind}"


@pytest.mark.parametrize("api", APIS)
def test_every_argument_has_a_case(api):
    found = modules(api)
    assert set(found) == set(BASELINES), "a module without a row in BASELINES"
    for name, cls in found.items():
        arguments = set(constructor_parameters(api, cls)) | set(call_parameters(cls))
        covered = {case.argument for case in CASES if case.module == name}
        missing = arguments - covered
        assert not missing, f"{api}.{name}: no case shows {sorted(missing)} matter"
        assert covered <= arguments, f"{api}.{name}: stale cases {covered - arguments}"


def sampled_cases() -> list[Any]:
    """By default every rejection (validation only, nothing compiles) and each
    module's first argument that changes the output; every case under ``slow``."""
    changing: set[str] = set()
    params = []
    for case in CASES:
        if case.kind == REJECTS or case.module not in changing:
            params.append(case)
        else:
            params.append(pytest.param(case, marks=pytest.mark.slow))
        if case.kind == CHANGES:
            changing.add(case.module)
    return params


@pytest.mark.parametrize("api", ["linen", pytest.param("nnx", marks=pytest.mark.slow)])
@pytest.mark.parametrize("case", sampled_cases(), ids=case_id)
def test_argument_matters(api, case):
    cls = modules(api)[case.module]
    init, call = BASELINES[case.module]
    init, call = dict(init, **case.init), dict(call, **case.call)
    if case.argument in constructor_parameters(api, cls):
        variant = run(api, case.module, dict(init, **{case.argument: case.value}), call)
    else:
        variant = run(api, case.module, init, dict(call, **{case.argument: case.value}))
    if case.init or case.call:
        baseline = run(api, case.module, init, call)
    else:
        baseline = baseline_outcome(api, case.module)
    if case.kind == CHANGES:
        assert baseline.error is None or variant.error is None, variant.error
        assert differ(baseline, variant), (
            f"{api}.{case.module}({case.argument}={case.value!r}) changed nothing"
        )
    else:
        assert baseline.error is None, baseline.error
        assert variant.error is not None, (
            f"{api}.{case.module} accepted {case.argument}={case.value!r}"
        )
        assert case.argument in str(variant.error), variant.error


@pytest.mark.parametrize("api", APIS)
def test_signature_is_the_constructor(api):
    """``inspect.signature(cls)`` and ``help(cls)`` show the real constructor, not
    nnx's metaclass ``(*args, **kwargs)``; an instance shows its ``__call__``."""
    for name, cls in modules(api).items():
        if api == "linen":
            expected = [f.name for f in dataclasses.fields(cls)]
        else:
            init = inspect.signature(cls.__init__)
            expected = init.replace(parameters=list(init.parameters.values())[1:])
            assert inspect.signature(cls) == expected, name
            expected = list(expected.parameters)
        assert list(inspect.signature(cls).parameters) == expected, name
        shown = pydoc.render_doc(cls, renderer=pydoc.plaintext)
        assert f"{name}{inspect.signature(cls)}" in shown, name

        init = BASELINES[name][0]
        if "rngs" in expected:
            init = dict(init, rngs=nnx.Rngs(0))
        call = inspect.signature(cls.__call__)
        call = call.replace(parameters=list(call.parameters.values())[1:])
        assert inspect.signature(cls(**init)) == call, name


def test_linen_and_nnx_modules_have_the_same_arguments():
    """Same module names; same constructor and call argument names, in the same
    order, with the same defaults (initializers aside: each API has its own)."""
    linen_modules, nnx_modules = modules("linen"), modules("nnx")
    assert set(linen_modules) == set(nnx_modules)
    for name, linen_cls in linen_modules.items():
        nnx_cls = nnx_modules[name]
        for kind, (a, b) in {
            "constructor": (
                constructor_parameters("linen", linen_cls),
                constructor_parameters("nnx", nnx_cls),
            ),
            "call": (call_parameters(linen_cls), call_parameters(nnx_cls)),
        }.items():
            assert list(a) == list(b), f"{name} {kind}: linen {list(a)}, nnx {list(b)}"
            for argument in a:
                if not callable(a[argument]) or isinstance(a[argument], type):
                    assert a[argument] == b[argument], f"{name}.{argument} default"
