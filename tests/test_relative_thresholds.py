"""Both forms of ``relative_position_bucket`` (the CPU compare chain and the table
lookup every accelerator runs) equal its host table."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from branches import BRANCHES, run_branch

import flax_posenc as fp
from flax_posenc.bias.relative import _distance_buckets


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize(
    ("num_buckets", "max_distance"),
    [(32, 128), (4, 3), (8, 5), (36, 32), (64, 128), (72, 40), (256, 1000)],
)
def test_buckets_equal_host_table(num_buckets, max_distance, bidirectional, branch):
    buckets = num_buckets // 2 if bidirectional else num_buckets
    if max_distance <= buckets // 2:
        pytest.skip("invalid size")
    r = np.arange(-3 * max_distance, 3 * max_distance + 1)
    table = _distance_buckets(buckets, max_distance)
    distance = np.abs(r) if bidirectional else np.maximum(-r, 0)
    offset = np.where(r > 0, buckets, 0) if bidirectional else 0
    want = offset + table[np.minimum(distance, max_distance)]
    got = run_branch(
        lambda r: fp.relative_position_bucket(
            r,
            bidirectional=bidirectional,
            num_buckets=num_buckets,
            max_distance=max_distance,
        ),
        jnp.asarray(r),
        branch=branch,
    )
    np.testing.assert_array_equal(got, want)
