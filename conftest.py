"""Doctest namespace: the names every docstring example may use without importing.

``jax``, ``jnp`` (``jax.numpy``), ``np`` (numpy), ``chex``, ``flax``, ``nnx``
(``flax.nnx``) and ``fp`` (``flax_posenc``), the convention the docs' home page
states. JAX itself is configured by ``tests/conftest.py`` (imported lazily here so
that its XLA flags come first).
"""

import pytest


@pytest.fixture(autouse=True)
def _doctest_imports(doctest_namespace):
    import chex
    import flax
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    import flax_posenc as fp

    doctest_namespace.update(
        jax=jax, jnp=jnp, np=np, chex=chex, flax=flax, nnx=nnx, fp=fp
    )
