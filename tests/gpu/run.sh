#!/usr/bin/env bash
# The GPU checks (/work/shared/GPU.md) as one script for a lent GPU machine, which has a CUDA driver,
# nvcc, Python with nvidia-nccl-cu13 and nvidia-cuda-runtime, but no Deno and no network:
#   1. unpack Deno from .device/deno.xz; locate libnccl and libcudart through Python; print doctor;
#   2. deno test: tests/gpu/ (device buffers, copies, streams, events, every NCCL collective on a
#      one-rank communicator against the TypeScript reference, error paths) and the FFI, backend and
#      doctor tests (their no-GPU cases skip themselves);
#   3. the NCCL benchmark (nccl-tests' table, bench/nccl.ts --quick) and the per-call cost of an all-reduce
#      through Deno FFI beside the same call from bench/native/nccl_overhead.cu, built here with nvcc;
#   4. logs and JSON under $OUT, a short table last; exit non-zero on any failed test or wrong element.
# It never changes the GPU's clocks or settings.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
OUT="${OUT:-$ROOT/.device/out}"
WORK="${TMPDIR:-/tmp}/dcomm-gpu"
mkdir -p "$OUT" "$WORK"
export DENO_DIR="$WORK/deno-dir" NO_COLOR=1
PY="${PYTHON:-python3}"
# nvcc may sit outside PATH in CUDA's own folder.
[ -d /usr/local/cuda/bin ] && export PATH="$PATH:/usr/local/cuda/bin"
failed=()
step() { printf '\n== %s\n' "$*"; }

step "Deno"
if [ -f .device/deno.xz ]; then
  xz -dc .device/deno.xz >"$WORK/deno" && chmod +x "$WORK/deno" && DENO="$WORK/deno"
elif command -v deno >/dev/null 2>&1; then
  DENO=$(command -v deno)
else
  echo "no Deno: put \`xz -6 -k\` of the deno binary at .device/deno.xz"
  exit 2
fi
"$DENO" --version || exit 2

step "libraries (through Python)"
# A DCOMM_NCCL_PATH already set wins; else pip's nvidia-nccl-cu13 (or -cu12) package.
if [ -n "${DCOMM_NCCL_PATH:-}" ]; then
  NCCL_DIR=$(dirname "$(dirname "$DCOMM_NCCL_PATH")")
else
  NCCL_DIR=$("$PY" -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)
  [ -n "$NCCL_DIR" ] && [ -e "$NCCL_DIR/lib/libnccl.so.2" ] && export DCOMM_NCCL_PATH="$NCCL_DIR/lib/libnccl.so.2"
fi
[ -z "${DCOMM_NCCL_INCLUDE:-}" ] && [ -n "$NCCL_DIR" ] && export DCOMM_NCCL_INCLUDE="$NCCL_DIR/include"
CUDART=$("$PY" -c '
import glob, importlib, os
for name in ("nvidia.cu13", "nvidia.cuda_runtime"):
    try:
        module = importlib.import_module(name)
    except ImportError:
        continue
    hits = [h for p in module.__path__ for h in sorted(glob.glob(os.path.join(p, "lib", "libcudart.so.*")))]
    if hits:
        print(hits[0])
        break
' 2>/dev/null)
[ -z "${DCOMM_CUDART_PATH:-}" ] && [ -n "$CUDART" ] && export DCOMM_CUDART_PATH="$CUDART"
echo "DCOMM_NCCL_PATH=${DCOMM_NCCL_PATH:-unset}"
echo "DCOMM_NCCL_INCLUDE=${DCOMM_NCCL_INCLUDE:-unset}"
echo "DCOMM_CUDART_PATH=${DCOMM_CUDART_PATH:-unset: the loader searches}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 | head -3 |
  tee "$OUT/nvidia-smi.txt"

step "doctor"
timeout 60 "$DENO" run -A --no-check cli/doctor.ts --backend nccl | tee "$OUT/doctor.txt"
doctor_rc=${PIPESTATUS[0]}
timeout 60 "$DENO" run -A --no-check cli/doctor.ts --json >"$OUT/doctor.json" 2>&1
[ "$doctor_rc" -eq 0 ] || failed+=("doctor: the nccl backend cannot run")

step "tests"
timeout 200 "$DENO" test -A --no-check tests/gpu/ tests/ffi/locate_test.ts tests/ffi/cudart_test.ts \
  tests/ffi/nccl_test.ts tests/ffi/layout_test.ts tests/backend/nccl/ tests/cli/doctor_test.ts \
  >"$OUT/tests.log" 2>&1
test_rc=$?
grep -E '\.\.\. (ok|FAILED|ignored)|^(ok|FAILED) \|' "$OUT/tests.log" | tail -n 80
tests_line=$(grep -E '^(ok|FAILED) \|' "$OUT/tests.log" | tail -n 1)
[ "$test_rc" -eq 0 ] || failed+=("tests (rc $test_rc)")

step "native per-call program (nvcc)"
native_args=()
if command -v nvcc >/dev/null 2>&1 && [ -e "${DCOMM_NCCL_INCLUDE:-}/nccl.h" ]; then
  if nvcc -O2 -I"$DCOMM_NCCL_INCLUDE" bench/native/nccl_overhead.cu -L"$NCCL_DIR/lib" -l:libnccl.so.2 \
    -Xlinker -rpath="$NCCL_DIR/lib" -o "$WORK/nccl_overhead" 2>&1 | tail -n 20; then
    [ -x "$WORK/nccl_overhead" ] && native_args=(--native "$WORK/nccl_overhead")
  fi
else
  echo "nvcc or NCCL's headers missing: the C column stays empty"
fi

step "benchmark"
timeout 150 "$DENO" run -A --no-check bench/nccl.ts --quick --overhead "${native_args[@]}" \
  --out "$OUT/collectives-nccl.json" --details "$OUT/nccl-details.json" 2>&1 | tee "$OUT/bench.txt"
bench_rc=${PIPESTATUS[0]}
[ "$bench_rc" -eq 0 ] || failed+=("benchmark (rc $bench_rc: a wrong element or a failure)")

step "summary"
{
  echo "nccl         : $(grep -m1 -E '^  NCCL ' "$OUT/doctor.txt" | sed -E 's/^  NCCL +//')"
  echo "gpu          : $(grep -m1 -E '^  GPU 0 ' "$OUT/doctor.txt" | sed -E 's/^  GPU 0 +//')"
  echo "tests        : ${tests_line:-no summary line (see tests.log)}"
  echo "bench rows   : $(grep -cE '^ +[0-9]+ +[0-9]+ ' "$OUT/bench.txt")," \
    "$(grep -m1 'out-of-bounds values' "$OUT/bench.txt" | sed 's/^# //')"
  grep -E '^# +(Deno FFI|dcomm|C \(nvcc\))' "$OUT/bench.txt" | sed 's/^# */per call     : /'
  # bench.txt holds one table per collective, each after a "# <collective>" line.
  awk '/^# allReduce$/ {f = 1; next} /^# [A-Za-z]+$/ {f = 0} f && /^ +[0-9]/ {last = $0} END {print last}' \
    "$OUT/bench.txt" | sed 's/^/largest a-r  :/'
  if [ ${#failed[@]} -gt 0 ]; then echo "FAILED       : ${failed[*]}"; else echo "result       : all passed"; fi
} | tee "$OUT/summary.txt"
[ ${#failed[@]} -eq 0 ]
