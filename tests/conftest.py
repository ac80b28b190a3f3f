"""Test set-up: 8 host CPU devices and strict rank promotion, before JAX starts;
hypothesis' budget follows the `slow` marker; each test module's compiled programs
are dropped when it ends."""

import gc
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax
from hypothesis import settings

jax.config.update("jax_numpy_rank_promotion", "raise")

# Compilation makes the first example slow; keep runs reproducible and bounded. The
# full budget runs with the `slow` tests (`-m ""`), a sample of it by default; tests
# whose every example compiles a new program take a fraction of settings.default.
settings.register_profile("full", deadline=None, max_examples=25, derandomize=True)
settings.register_profile("default", settings.get_profile("full"), max_examples=5)
settings.load_profile("default")


def pytest_configure(config):
    # Before the test modules import (their @settings read settings.default then);
    # hypothesis' own --hypothesis-profile, configured after this, still wins.
    if "not slow" not in (config.option.markexpr or ""):
        settings.load_profile("full")


def pytest_collection_finish(session):
    """Freeze what collection built (modules, parameters, fixtures' data) so the
    collector never scans it again, and collect the young generation less often:
    tracing makes many short-lived objects, and with the defaults a worker spent
    10 s of its 3 minutes in the collector."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 10, 10)


def pytest_runtest_teardown(item, nextitem):
    """At the end of each test module, drop JAX's compiled programs: they are not
    shared across modules, and a worker that kept them all grew past 4 GB."""
    if nextitem is None or nextitem.path != item.path:
        jax.clear_caches()
        gc.collect()


def pytest_sessionfinish(session):
    """Collect now, then freeze what is left, while an xdist worker's controller
    still waits for it. Afterwards the controller gives a finished worker 5 s
    (execnet) before it sends it SIGINT; pytest's final ``gc.collect()`` over a
    large heap took that long on a loaded machine, and the KeyboardInterrupt
    surfaced in hypothesis' gc callback as an "Exception ignored" warning."""
    gc.collect()
    gc.freeze()
