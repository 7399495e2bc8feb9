#!/bin/bash
# tests/gpu/run.sh - the one script for a lent GPU (H200): build with
# sm_90a, check every CUDA kernel against its reference, end-to-end parity
# with the CPU engine (when the engine routes cuda:N to the CUDA backend),
# then benchmarks. Logs under $OUT (or ./gpu-out); a short table last.
# Budget: < 8 minutes on one H200.
# Env: E2E_8B_LAYERS (default 36 = the full 8B shape when the disk has room,
# else 12), E2E_SECONDS (timed decode seconds per point, default 2).
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
B=build-gpu
T0=$(date +%s)
declare -a ROWS
row() { ROWS+=("$(printf '%-34s %s' "$1" "$2")"); }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$OUT/gpu.txt" 2>&1 ||
    echo "no GPU (nvidia-smi failed)" >"$OUT/gpu.txt"
git rev-parse HEAD >"$OUT/commit.txt" 2>/dev/null || echo unknown >"$OUT/commit.txt"

# 0. toolchain and dependencies on a bare machine (docs/cuda.md): nvcc may
# not be on PATH, and our -dev packages and pkg-config may be missing, in
# which case the Makefile builds against gpu-deps/ (`make gpu-bundle` on a
# machine with apt, carried with the working tree).
fail() { row "$1" "FAIL: $2"; echo "run.sh: $2" >&2; printf '%s\n' "${ROWS[@]}"; exit 1; }
if ! command -v nvcc >/dev/null 2>&1; then
    for d in /usr/local/cuda/bin /usr/local/cuda-*/bin /opt/cuda/bin; do
        [ -x "$d/nvcc" ] && { PATH="$d:$PATH"; break; }
    done
fi
command -v nvcc >/dev/null 2>&1 || fail toolkit "no nvcc on PATH or in /usr/local/cuda*/bin"
CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc)")")
export PATH CUDA_HOME
export LD_LIBRARY_PATH="$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
DEPS=$(make -s BUILD=$B print-DEP_OK 2>/dev/null)
case "$DEPS" in
    yes) row deps "system packages (pkg-config)" ;;
    bundle) row deps "gpu-deps/ bundle" ;;
    *) fail deps "jansson/xxhash/pcre2/utf8proc missing and no gpu-deps/: run 'make gpu-bundle' on a machine with apt and carry gpu-deps" ;;
esac

# 1. build: only sm_90a SASS here, to stay inside the budget
ARCH='-gencode arch=compute_90a,code=sm_90a'
if ! timeout 300 make -j"${JOBS:-16}" BUILD=$B CUDA=1 NVCC="$(command -v nvcc)" CUDA_ARCHS="$ARCH" lib tools >"$OUT/build.log" 2>&1; then
    row build FAIL; tail -n 30 "$OUT/build.log"
    printf '%s\n' "${ROWS[@]}"; exit 1
fi
# A library without the CUDA backend would run every check on nothing.
grep -qx 'CUDA=1' $B/config.stamp && nm -g --defined-only $B/libqwinfer.a 2>/dev/null | grep -q ' qwi_cuda_backend_create$' ||
    fail build "$B/libqwinfer.a was built without the CUDA backend (see $OUT/build.log)"
row build "ok ($(( $(date +%s) - T0 ))s)"

# models for e2e (bf16, so the CPU and CUDA engines read identical weights),
# generated in the background while the kernel checks run (CPU + disk only).
# The full 8B is ~16.4 GB (~1 min at ~300 MB/s); with less than 24 GiB free
# it gets 12 layers (~7 GB) and its rows are named 8b_L12: the bandwidth
# bound is then computed for that reduced shape (fewer layers, full lm_head).
M=$B/e2e-models
rm -rf "$M"; mkdir -p "$M"
AVAIL_G=$(df -BG --output=avail "$M" 2>/dev/null | tail -n1 | tr -dc 0-9)
L8=${E2E_8B_LAYERS:-36}
if [ -z "${E2E_8B_LAYERS:-}" ] && [ "${AVAIL_G:-0}" -lt 24 ]; then L8=12; fi
if [ "${AVAIL_G:-0}" -lt 10 ]; then L8=0; fi
N8=8b; [ "$L8" != 36 ] && N8=8b_L$L8
(
    mk() { timeout 200 $B/bin/qw-makemodel --dtype bf16 "$@"; }
    mk --shape tiny --out "$M/tiny" && mk --shape 0.6b --out "$M/0.6b" || exit 1
    if [ "$L8" -gt 0 ]; then
        mk --shape 8b --layers "$L8" --out "$M/$N8" || rm -rf "$M/$N8"
    fi
) >"$OUT/models.log" 2>&1 &
GEN_PID=$!
# the same dependency flags make used (system or bundle, with its rpath);
# nvcc passes -Wl, options to the host linker with -Xlinker
DEP_LIBS=$(make -s BUILD=$B print-DEP_LIBS | sed 's/-Wl,-rpath,/-Xlinker -rpath -Xlinker /g')
LIBS="$DEP_LIBS -L$CUDA_HOME/lib64 -lcublasLt -lcublas -lcudart -lpthread -lm"
nvcc -O2 -std=c++17 $ARCH -Iinclude -Ilib tests/gpu/check_kernels.cu $B/libqwinfer.a $LIBS \
    -o $B/check_kernels >"$OUT/check_build.log" 2>&1 || { row check-build FAIL; tail -n 20 "$OUT/check_build.log"; }

# 2. kernel checks and micro-benchmarks
if [ -x $B/check_kernels ]; then
    timeout 240 $B/check_kernels >"$OUT/kernels.log" 2>&1
    rc=$?
    nf=$(grep -c 'FAIL' "$OUT/kernels.log")
    row "kernel checks" "$(grep -c '^CHECK' "$OUT/kernels.log") run, $nf failed (rc $rc)"
    grep '^CHECK.*FAIL' "$OUT/kernels.log" | head -n 8
    while read -r _ name val unit pct; do row "$name" "$val $unit $pct"; done < <(grep '^BENCH' "$OUT/kernels.log")
fi

# 3. end-to-end parity and decode/prefill throughput through the engine
#    (tests/gpu/e2e.c, public API only; linked against the shared library).
#    It gets the copy bandwidth and the GEMM peak measured in step 2.
COPY=$(awk '$1=="BENCH" && $2=="copy_d2d" {print $3; exit}' "$OUT/kernels.log" 2>/dev/null)
PEAK=$(awk '$1=="BENCH" && $2=="gemm_bf16_8192" {print $3; exit}' "$OUT/kernels.log" 2>/dev/null)
if [ -f tests/gpu/e2e.c ]; then
    if ${CC:-cc} -O2 -std=c11 -Wall -Wextra -Iinclude tests/gpu/e2e.c -L$B -lqwinfer \
            -Wl,-rpath,"$PWD/$B" -o $B/e2e >"$OUT/e2e_build.log" 2>&1; then
        wait $GEN_PID; gen_rc=$?
        [ $gen_rc -ne 0 ] && { row "e2e models" "FAIL (rc $gen_rc)"; tail -n 5 "$OUT/models.log"; }
        ARGS=(--copy-gbs "${COPY:-0}" --peak-tflops "${PEAK:-0}" --seconds "${E2E_SECONDS:-2}")
        [ -f "$M/tiny/config.json" ] && ARGS+=(--parity "tiny=$M/tiny")
        [ -f "$M/0.6b/config.json" ] && ARGS+=(--parity "0.6b=$M/0.6b")
        # what is left of the 8 minutes (minus 20 s for the table) bounds e2e;
        # it needs ~1.5 min with both benchmarks, ~30 s for parity alone
        LEFT=$(( 460 - ($(date +%s) - T0) )); [ $LEFT -gt 240 ] && LEFT=240
        if [ $LEFT -ge 120 ]; then
            [ -f "$M/0.6b/config.json" ] && ARGS+=(--bench "0.6b=$M/0.6b")
            [ -f "$M/$N8/config.json" ] && ARGS+=(--bench "$N8=$M/$N8")
        else
            row "e2e benchmarks" "skipped (${LEFT}s left)"
        fi
        if [ $LEFT -ge 30 ]; then
            LD_LIBRARY_PATH="$PWD/$B:$LD_LIBRARY_PATH" \
                timeout $LEFT $B/e2e "${ARGS[@]}" >"$OUT/e2e.log" 2>&1
            rc=$?
            if [ $rc -eq 77 ]; then
                row e2e "no device (rc 77)"; grep -m1 'no device' "$OUT/e2e.log"
            else
                np=$(grep -c '^PARITY [^ ]* PASS [0-9]*/' "$OUT/e2e.log")
                nf=$(grep -c '^PARITY [^ ]* FAIL [0-9]*/' "$OUT/e2e.log")
                row "e2e parity (rc $rc)" "$np passed, $nf failed"
                grep '^PARITY.*\(FAIL\|diverges\)' "$OUT/e2e.log" | head -n 8
                while read -r _ name val unit pct; do row "$name" "$val $unit $pct"; done < <(grep '^e2e ' "$OUT/e2e.log")
            fi
        else
            row e2e "skipped (${LEFT}s left)"
        fi
    else
        row e2e "build FAIL"; tail -n 10 "$OUT/e2e_build.log"
    fi
else
    row e2e "not present"
fi
kill $GEN_PID 2>/dev/null

echo
echo "== qwinfer GPU run, commit $(cat "$OUT/commit.txt"), $(head -n1 "$OUT/gpu.txt"), $(( $(date +%s) - T0 ))s"
printf '%s\n' "${ROWS[@]}" | tee "$OUT/table.txt"
