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


# Docstring examples run with the `slow` tests (`-m ""`, as .ci/run does): each
# compiles its own programs (a ring over 8 devices, a blockwise scan, a module's
# init), about a second apiece and a seventh of the default run's time, and the
# calls they show are tested by tests/.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if isinstance(item, pytest.DoctestItem):
            item.add_marker(pytest.mark.slow)
