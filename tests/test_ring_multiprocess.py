"""Ring attention across two processes on localhost, four CPU devices each.

The test starts this file twice as a script (``--worker``): each process calls
``jax.distributed.initialize`` (coordinator on 127.0.0.1, CPU collectives over gloo),
builds the global arrays from its own shards, runs :func:`flax_posenc.sharded_ring_
attention` (and its gradient) over all eight devices, and compares its shards with the
result this pytest process computed on its own eight host devices (one process).

Every JAX version in the supported range (jax >= 0.7.1) has gloo CPU collectives
(jaxlib 0.4.27 and later); the test skips, saying why, where the config option or
``jax.distributed`` is missing. Loopback addresses only; every wait is bounded
(``initialization_timeout``, the subprocess timeout).
"""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys

import numpy as np
import pytest

HERE = pathlib.Path(__file__).resolve().parent
SHAPE = (2, 64, 6, 8)  # [B, L, N, H]; k/v [B, L, 2, 8]
TIMEOUT_S = 240


def inputs():
    rng = np.random.default_rng(11)
    q = rng.standard_normal(SHAPE).astype(np.float32)
    k, v = rng.standard_normal((2, SHAPE[0], SHAPE[1], 2, SHAPE[3])).astype(np.float32)
    positions = np.arange(SHAPE[1]) % 40  # two packed sequences
    segments = (np.arange(SHAPE[1]) >= 40).astype(np.int32)
    return q, k, v, positions, segments


def attend(mesh):
    """jit of (out, dq) of ALiBi causal ring attention with packing, on ``mesh``."""
    import jax
    import jax.numpy as jnp

    import flax_posenc as fp

    _, _, _, positions, segments = inputs()

    def ring(q, k, v):
        return fp.sharded_ring_attention(
            q, k, v, mesh=mesh, axis_name="seq", q_positions=positions,
            q_segment_ids=segments, bias=fp.AlibiBias(6), causal=True,
            block_q=4, block_k=4,
        )  # fmt: skip

    def both(q, k, v):
        out = ring(q, k, v)
        dq = jax.grad(lambda q: jnp.sum(jnp.sin(ring(q, k, v))))(q)
        return out, dq

    return jax.jit(both)


def worker(process_id: int, port: int, want_path: str) -> None:
    import jax

    if not hasattr(jax.config, "jax_cpu_collectives_implementation"):
        print(f"SKIP: jax {jax.__version__} has no CPU collectives option")
        return
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}",
        num_processes=2,
        process_id=process_id,
        initialization_timeout=60,
    )
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    assert jax.device_count() == 8 and jax.local_device_count() == 4
    mesh = jax.make_mesh((8,), ("seq",), axis_types=(AxisType.Auto,))
    sharding = NamedSharding(mesh, P(None, "seq"))
    q, k, v, _, _ = inputs()
    arrays = [
        jax.make_array_from_callback(x.shape, sharding, lambda index, x=x: x[index])
        for x in (q, k, v)
    ]
    out, dq = attend(mesh)(*arrays)
    want = np.load(want_path)
    for got, name in ((out, "out"), (dq, "dq")):
        for shard in got.addressable_shards:
            np.testing.assert_allclose(
                np.asarray(shard.data), want[name][shard.index], atol=2e-6, rtol=2e-6
            )
    print(f"OK process {process_id}: {len(out.addressable_shards)} shards")
    jax.distributed.shutdown()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # two fresh processes import JAX and compile: ~35 s
def test_two_processes_equal_one(tmp_path):
    """Two processes x 4 devices give the shards of one process x 8 devices:
    outputs and dq (ALiBi, causal, packing, GQA)."""
    import jax
    from jax.sharding import AxisType

    if not hasattr(jax, "distributed"):
        pytest.skip(f"jax {jax.__version__} has no jax.distributed")
    if not hasattr(jax.config, "jax_cpu_collectives_implementation"):
        pytest.skip(
            f"jax {jax.__version__} cannot run CPU collectives across processes"
        )
    mesh = jax.make_mesh((8,), ("seq",), axis_types=(AxisType.Auto,))
    q, k, v, _, _ = inputs()
    out, dq = attend(mesh)(q, k, v)
    want = tmp_path / "want.npz"
    np.savez(want, out=np.asarray(out), dq=np.asarray(dq))

    port = free_port()
    env = dict(os.environ)
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(
        [str(HERE.parent), env.get("PYTHONPATH", "")]
    ).rstrip(os.pathsep)
    workers = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", str(i), str(port), str(want)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outputs = []
    try:
        for w in workers:
            outputs.append(w.communicate(timeout=TIMEOUT_S)[0])
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.communicate()
    skipped = [o for o in outputs if o.startswith("SKIP:")]
    if skipped:
        pytest.skip(skipped[0].strip())
    for i, (w, text) in enumerate(zip(workers, outputs, strict=True)):
        assert w.returncode == 0, f"process {i} failed:\n{text[-4000:]}"
        assert f"OK process {i}: 4 shards" in text, text[-4000:]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
