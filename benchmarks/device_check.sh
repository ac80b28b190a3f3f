#!/usr/bin/env bash
# The accelerator checks (issues 18 and 33): run this when a GPU (or TPU) is at hand.
#
#   bash benchmarks/device_check.sh [OUT_DIR]     # 9 minutes at most
#
# Prints the versions and nvidia-smi; runs the Pallas kernel compiled on the device
# against "xla" (values and gradients, every bias); the attention kernel benchmark
# (the kernel with no bias, ALiBi, T5, FIRE; "xla"; cuDNN with and without a dense
# bias, or splash on a TPU; L = 4k, 16k, 32k, bfloat16, causal); the tests whose
# values differ by backend (the reference forms against float64, the accelerator
# lowerings); then the RoPE benchmark's quick mode if time is left. Logs and JSON go to OUT_DIR ($OUT, else
# /tmp/device_check). Needs the package with its test extra and a CUDA (or TPU) build
# of jaxlib in the active Python. Each step has its own time limit; together they
# stay under 9 minutes. Add what it prints as a dated entry of benchmarks/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-/tmp/device_check}}"
mkdir -p "$out"
start=$SECONDS

echo "== versions"
python - <<'EOF' 2>&1 | tee "$out/versions.txt"
import platform, jax, jaxlib
print("python", platform.python_version(), "jax", jax.__version__, "jaxlib", jaxlib.__version__)
print("backend", jax.default_backend(), jax.devices())
EOF
nvidia-smi 2>&1 | tee "$out/nvidia-smi.txt" || echo "nvidia-smi failed (rc=$?)"

echo "== the Pallas kernel compiled on $(python -c 'import jax; print(jax.default_backend())')"
# Values and gradients of the backend's compiled kernel against "xla" (skipped off a
# GPU/TPU). A failure is reported at the end, after the benchmarks have run.
tests_rc=0
timeout 150 python -m pytest -q -p no:cacheprovider -rfs -n 0 \
  tests/test_pallas_attention.py -k on_its_device \
  2>&1 | tee "$out/kernel_tests.txt" || tests_rc=$?

echo "== attention kernel benchmark (L = 4k, 16k, 32k)"
timeout 270 python benchmarks/attention_kernel_benchmark.py --time-limit 200 \
  --json "$out/attention_kernel.json" 2>&1 | tee "$out/attention_kernel.txt" ||
  echo "attention benchmark stopped (rc=$?): see $out/attention_kernel.txt"

echo "== tests on $(python -c 'import jax; print(jax.default_backend())')"
# The CPU forms skip themselves off CPU (tests/branches.py); -rfs lists why.
timeout 100 python -m pytest -q -p no:cacheprovider -rfs \
  tests/test_accelerator_export.py tests/test_rotate_paths.py tests/test_rope.py \
  tests/test_sinusoidal.py tests/test_exact_angles.py tests/test_relative.py \
  tests/test_relative_thresholds.py tests/test_bfloat16.py \
  2>&1 | tee "$out/tests.txt" || tests_rc=$?

left=$((530 - (SECONDS - start)))
if ((left > 20)); then
  echo "== RoPE benchmark (quick, ${left} s left)"
  timeout "$left" python benchmarks/rope_benchmark.py --quick \
    --json "$out/rope_quick.json" 2>&1 | tee "$out/rope_quick.txt" ||
    echo "RoPE benchmark stopped (rc=$?)"
fi
echo "== done in $((SECONDS - start)) s; results in $out; tests rc=$tests_rc"
exit "$tests_rc"
