#!/usr/bin/env bash
# The accelerator checks (issue 18): run this the first time a GPU is at hand.
#
#   bash benchmarks/device_check.sh [OUT_DIR]     # about 4 minutes at most
#
# Prints the versions and nvidia-smi, runs the tests whose values differ by backend
# (every public path of the reference forms, the forms every GPU and TPU runs, against
# float64; the accelerator lowerings) on the default device, then the RoPE benchmark:
# its quick mode, and the full shapes if time is left. Logs and the benchmark's JSON
# go to OUT_DIR ($OUT, else /tmp/device_check). Needs the package with its test extra
# and a CUDA build of jaxlib in the active Python. Each step has its own time limit;
# together they stay under 5 minutes. Add what it prints as a dated entry of
# benchmarks/README.md.
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

echo "== tests on $(python -c 'import jax; print(jax.default_backend())')"
# The CPU forms skip themselves off CPU (tests/branches.py); -rfs lists why.
# A failure is reported at the end, after the benchmark has run.
tests_rc=0
timeout 170 python -m pytest -q -p no:cacheprovider -rfs \
  tests/test_accelerator_export.py tests/test_rotate_paths.py tests/test_rope.py \
  tests/test_sinusoidal.py tests/test_exact_angles.py tests/test_relative.py \
  tests/test_relative_thresholds.py tests/test_bfloat16.py \
  2>&1 | tee "$out/tests.txt" || tests_rc=$?

echo "== benchmark (quick)"
timeout 40 python benchmarks/rope_benchmark.py --quick --json "$out/rope_quick.json" \
  2>&1 | tee "$out/rope_quick.txt"

left=$((285 - (SECONDS - start)))
if ((left > 30)); then
  echo "== benchmark (full shapes, ${left} s left)"
  timeout "$left" python benchmarks/rope_benchmark.py --repeats 11 \
    --json "$out/rope_full.json" 2>&1 | tee "$out/rope_full.txt" ||
    echo "full benchmark stopped (rc=$?): see $out/rope_full.txt"
fi
echo "== done in $((SECONDS - start)) s; results in $out; tests rc=$tests_rc"
exit "$tests_rc"
