#!/bin/bash
# tests/gpu/run.sh - the one script for a lent GPU (H200): build with
# sm_90a, check every CUDA kernel against its reference, end-to-end parity
# with the CPU engine (when the engine routes cuda:N to the CUDA backend),
# then benchmarks. Logs under $OUT (or ./gpu-out); a short table last.
# Budget: RUN_BUDGET seconds in all (default 530, < 9 minutes on one H200;
# the device tool allows 10 per command): every step's timeout is cut to
# what is left of it, so the table always prints.
# Env: E2E_8B_LAYERS (default 36 = the full 8B shape when the disk has room,
# else 12), E2E_SECONDS (timed decode seconds per point, default 2),
# PACK_LOGS=1 (one logs.tgz instead of a folder of logs: the device tool
# brings back at most 8 files), JOBS (make -j, default 16).
set -u
OUT=${OUT:-$PWD/gpu-out}
LOG=$OUT/logs       # every log; PACK_LOGS=1 packs them into $OUT/logs.tgz at the end
mkdir -p "$OUT" "$LOG"
B=build-gpu
T0=$(date +%s)
BUDGET=${RUN_BUDGET:-530}
# seconds left of the budget, less $1 kept for the steps after this one (>= 10)
left() { local l=$(( BUDGET - ($(date +%s) - T0) - ${1:-0} )); [ $l -lt 10 ] && l=10; echo $l; }
# the smaller of a step's own limit and what the budget leaves it
cap() { local l; l=$(left "${2:-0}"); [ "$1" -lt "$l" ] && l=$1; echo $l; }
declare -a ROWS
row() { ROWS+=("$(printf '%-34s %s' "$1" "$2")"); }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$LOG/gpu.txt" 2>&1 ||
    echo "no GPU (nvidia-smi failed)" >"$LOG/gpu.txt"
git rev-parse HEAD >"$LOG/commit.txt" 2>/dev/null || echo unknown >"$LOG/commit.txt"
# the machine as found (the first run on a lent machine reads these first)
{ uname -a; nproc; free -g | head -n 2; df -h . | tail -n 1
  for t in nvcc cc gcc make ar nm python3 compute-sanitizer; do printf '%s: %s\n' "$t" "$(command -v $t || echo missing)"; done
  nvidia-smi 2>&1 | head -n 15; } >"$LOG/machine.txt" 2>&1

# 0. toolchain and dependencies on a bare machine (docs/cuda.md): nvcc may
# not be on PATH, and our -dev packages and pkg-config may be missing, in
# which case the Makefile builds against gpu-deps/ (`make gpu-bundle` on a
# machine with apt, carried with the working tree).
fail() { row "$1" "FAIL: $2"; echo "run.sh: $2" >&2; printf '%s\n' "${ROWS[@]}" | tee "$OUT/table.txt"; exit 1; }
if ! command -v nvcc >/dev/null 2>&1; then
    for d in /usr/local/cuda/bin /usr/local/cuda-*/bin /opt/cuda/bin; do
        [ -x "$d/nvcc" ] && { PATH="$d:$PATH"; break; }
    done
fi
command -v nvcc >/dev/null 2>&1 || fail toolkit "no nvcc on PATH or in /usr/local/cuda*/bin"
# an image without GNU make or a plain 'cc': the bundle's make (libc only), gcc
if ! command -v make >/dev/null 2>&1 && [ -x gpu-deps/usr/bin/make ]; then
    mkdir -p "$B/tools-bin"; ln -sf "$PWD/gpu-deps/usr/bin/make" "$B/tools-bin/make"; PATH="$PWD/$B/tools-bin:$PATH"
fi
command -v make >/dev/null 2>&1 || fail toolkit "no make (and no gpu-deps/usr/bin/make: rerun 'make gpu-bundle')"
if ! command -v cc >/dev/null 2>&1; then
    command -v gcc >/dev/null 2>&1 || fail toolkit "no C compiler (cc or gcc)"
    export CC=gcc
fi
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
if ! timeout "$(cap 300 60)" make -j"${JOBS:-16}" BUILD=$B ${CC:+CC=$CC} CUDA=1 NVCC="$(command -v nvcc)" CUDA_ARCHS="$ARCH" lib tools >"$LOG/build.log" 2>&1; then
    row build FAIL; tail -n 30 "$LOG/build.log"
    printf '%s\n' "${ROWS[@]}"; exit 1
fi
# A library without the CUDA backend would run every check on nothing.
grep -qx 'CUDA=1' $B/config.stamp && nm -g --defined-only $B/libqwinfer.a 2>/dev/null | grep -q ' qwi_cuda_backend_create$' ||
    fail build "$B/libqwinfer.a was built without the CUDA backend (see $LOG/build.log)"
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
    # quantized models (issue 16) for CPU-vs-CUDA parity: every format on
    # tiny (group 32 and a 48-wide FP8 block: several groups, partial
    # blocks; GPTQ with a quantized head: the head's GEMV passes; FP8 in
    # 128 x 128 blocks at the smallest shape that keeps them whole, for the
    # W8A8 path's scheduling invariants), and AWQ
    # at 0.6b sizes (vectorized GEMV path, real k)
    for q in "awq:--quant awq --group-size 32" "gptq4:--quant gptq --bits 4 --group-size 32" \
             "gptq8:--quant gptq --bits 8 --group-size 32 --gptq-asym" "fp8:--quant fp8 --fp8-block 48" \
             "gptq4head:--quant gptq --bits 4 --group-size 32 --gptq-lm-head" \
             "fp8blk:--quant fp8 --fp8-block 128 --hidden 128 --heads 4 --kv-heads 2 --head-dim 64 --intermediate 256"; do
        mk --shape tiny ${q#*:} --out "$M/tiny_${q%%:*}" || rm -rf "$M/tiny_${q%%:*}"
    done
    mk --shape 0.6b --quant awq --out "$M/0.6b_awq" || rm -rf "$M/0.6b_awq"
    # FP8 in 128 x 128 blocks at 0.6b sizes: W8A8 prefill through the
    # block-scaled cuBLASLt GEMM (cuda/fp8_block.h)
    mk --shape 0.6b --quant fp8 --fp8-block 128 --out "$M/0.6b_fp8" || rm -rf "$M/0.6b_fp8"
    if [ "$L8" -gt 0 ]; then
        mk --shape 8b --layers "$L8" --out "$M/$N8" || rm -rf "$M/$N8"
    fi
) >"$LOG/models.log" 2>&1 &
GEN_PID=$!
# the same dependency flags make used (system or bundle, with its rpath);
# nvcc passes -Wl, options to the host linker with -Xlinker
DEP_LIBS=$(make -s BUILD=$B print-DEP_LIBS | sed 's/-Wl,-rpath,/-Xlinker -rpath -Xlinker /g')
LIBS="$DEP_LIBS -L$CUDA_HOME/lib64 -lcublasLt -lcublas -lcudart -lpthread -lm"
nvcc -O2 -std=c++17 $ARCH -Iinclude -Ilib tests/gpu/check_kernels.cu $B/libqwinfer.a $LIBS \
    -o $B/check_kernels >"$LOG/check_build.log" 2>&1 || { row check-build FAIL; tail -n 20 "$LOG/check_build.log"; }
nvcc -O2 -std=c++17 $ARCH -Iinclude -Ilib tests/gpu/check_quant.cu $B/libqwinfer.a $LIBS \
    -o $B/check_quant >"$LOG/check_quant_build.log" 2>&1 ||
    { row check-quant-build FAIL; tail -n 20 "$LOG/check_quant_build.log"; }

# 2. kernel checks and micro-benchmarks, one process per group so that a
#    CUDA fault in one group does not hide the others; the first CUDA error
#    string of a group that crashed goes into the table.
: >"$LOG/kernels.log"
if [ -x $B/check_kernels ]; then
    for g in $($B/check_kernels list); do
        lim=120; [ "$g" = bench ] && lim=150
        timeout "$(cap $lim 240)" $B/check_kernels "$g" >"$LOG/kernels_$g.log" 2>&1
        rc=$?
        cat "$LOG/kernels_$g.log" >>"$LOG/kernels.log"
        nrun=$(grep -c '^CHECK' "$LOG/kernels_$g.log")
        nf=$(grep -c '^CHECK.*FAIL' "$LOG/kernels_$g.log")
        err=$(grep -m1 -o 'CUDA error .*\|no device.*' "$LOG/kernels_$g.log")
        if [ $rc -eq 0 ] || [ $rc -eq 1 ]; then row "kernels $g" "$nrun run, $nf failed"
        else row "kernels $g" "rc $rc after $nrun checks${err:+: $err}"; fi
        grep '^CHECK.*FAIL' "$LOG/kernels_$g.log" | head -n 4
    done
    while read -r _ name val unit pct; do row "$name" "$val $unit $pct"; done < <(grep '^BENCH' "$LOG/kernels.log")
fi
# quantized linears (cuda/quant.cu): checks, then GEMV GB/s as a share of
# the copy bandwidth just measured
if [ -x $B/check_quant ]; then
    COPY0=$(awk '$1=="BENCH" && $2=="copy_d2d" {print $3; exit}' "$LOG/kernels.log" 2>/dev/null)
    timeout "$(cap 120 240)" $B/check_quant --copy-gbs "${COPY0:-0}" >"$LOG/quant.log" 2>&1
    rc=$?
    nrun=$(grep -c '^CHECK' "$LOG/quant.log"); nf=$(grep -c '^CHECK.*FAIL' "$LOG/quant.log")
    err=$(grep -m1 -o 'CUDA error .*\|no device.*' "$LOG/quant.log")
    if [ $rc -eq 0 ] || [ $rc -eq 1 ]; then row "kernels quant" "$nrun run, $nf failed"
    else row "kernels quant" "rc $rc after $nrun checks${err:+: $err}"; fi
    grep '^CHECK.*FAIL' "$LOG/quant.log" | head -n 4
    while read -r _ name val unit pct; do row "$name" "$val $unit $pct"; done < <(grep '^BENCH' "$LOG/quant.log")
fi
# 3. end-to-end parity and decode/prefill throughput through the engine
#    (tests/gpu/e2e.c, public API only; linked against the shared library).
#    It gets the copy bandwidth and the GEMM peak measured in step 2.
COPY=$(awk '$1=="BENCH" && $2=="copy_d2d" {print $3; exit}' "$LOG/kernels.log" 2>/dev/null)
PEAK=$(awk '$1=="BENCH" && $2=="gemm_bf16_8192" {print $3; exit}' "$LOG/kernels.log" 2>/dev/null)
if [ -f tests/gpu/e2e.c ]; then
    if ${CC:-cc} -O2 -std=c11 -Wall -Wextra -Iinclude tests/gpu/e2e.c tests/gpu/e2e_features.c \
            tests/gpu/e2e_invariants.c tests/gpu/e2e_late_refusal.c -L$B -lqwinfer -lm \
            -Wl,-rpath,"$PWD/$B" -o $B/e2e >"$LOG/e2e_build.log" 2>&1; then
        wait $GEN_PID; gen_rc=$?
        [ $gen_rc -ne 0 ] && { row "e2e models" "FAIL (rc $gen_rc)"; tail -n 5 "$LOG/models.log"; }
        mkdir -p "$B/dump"
        ARGS=(--copy-gbs "${COPY:-0}" --peak-tflops "${PEAK:-0}" --seconds "${E2E_SECONDS:-2}" --dump "$B/dump")
        [ -f "$M/tiny/config.json" ] && ARGS+=(--parity "tiny=$M/tiny" --features "tiny=$M/tiny" --invariants "tiny=$M/tiny")
        [ -f "$M/0.6b/config.json" ] && ARGS+=(--parity "0.6b=$M/0.6b")
        for n in tiny_awq tiny_gptq4 tiny_gptq8 tiny_fp8 tiny_gptq4head 0.6b_awq; do
            if [ -f "$M/$n/config.json" ]; then ARGS+=(--parity "$n=$M/$n"); else row "e2e $n" "model missing (see models.log)"; fi
        done
        # W8A8: FP8 in 128 x 128 blocks, prefill through the block-scaled GEMM,
        # decode through the W8A8 GEMV
        if [ -f "$M/0.6b_fp8/config.json" ]; then ARGS+=(--parity-w8a8 "0.6b_fp8=$M/0.6b_fp8")
        else row "e2e 0.6b_fp8" "model missing (see models.log)"; fi
        # W8A8 at every step (decode through the W8A8 GEMV): the invariants
        [ -f "$M/tiny_fp8blk/config.json" ] && ARGS+=(--invariants-w8a8 "tiny_fp8blk=$M/tiny_fp8blk")
        # prefill in chunks of 32 rows: int4 steps through qwk_qgemm (cuda/qgemm.h;
        # at 0.6b sizes o_proj and down_proj split k)
        [ -f "$M/tiny_gptq4head/config.json" ] && ARGS+=(--parity-chunked "tiny_gptq4head_chunked=$M/tiny_gptq4head")
        [ -f "$M/0.6b_awq/config.json" ] && ARGS+=(--parity-chunked "0.6b_awq_chunked=$M/0.6b_awq")
        # fp8 (e4m3) KV cache: both engines on it, the bf16 models' weights
        [ -f "$M/tiny/config.json" ] && ARGS+=(--parity-kv-fp8 "tiny_fp8kv=$M/tiny")
        [ -f "$M/0.6b/config.json" ] && ARGS+=(--parity-kv-fp8 "0.6b_fp8kv=$M/0.6b")
        # f32 KV refused naming the option, fp8 KV created
        [ -f "$M/tiny/config.json" ] && ARGS+=(--kv-refusal "$M/tiny")
        # what is left of the budget, less ~90 s for the oracle and memcheck,
        # bounds e2e; it needs ~1.5-2 min with the benchmarks, ~30 s for
        # parity alone (estimates: never run on a device yet)
        LEFT=$(cap 240 90)
        if [ $LEFT -ge 120 ]; then
            [ -f "$M/0.6b/config.json" ] && ARGS+=(--bench "0.6b=$M/0.6b")
            [ -f "$M/$N8/config.json" ] && ARGS+=(--bench "$N8=$M/$N8")
            # W8A8 end to end: prefill tokens/s beside 0.6b's (bf16)
            [ $LEFT -ge 150 ] && [ -f "$M/0.6b_fp8/config.json" ] && ARGS+=(--bench "0.6b_fp8=$M/0.6b_fp8")
            # int4 end to end: decode at 16 and 64 sequences through qwk_qgemm
            # (cuda/qgemm.h), 256 through the dequantizing path
            [ $LEFT -ge 180 ] && [ -f "$M/0.6b_awq/config.json" ] && ARGS+=(--bench "0.6b_awq=$M/0.6b_awq")
        else
            row "e2e benchmarks" "skipped (${LEFT}s left)"
        fi
        if [ $LEFT -ge 30 ]; then
            LD_LIBRARY_PATH="$PWD/$B:$LD_LIBRARY_PATH" \
                timeout $LEFT $B/e2e "${ARGS[@]}" >"$LOG/e2e.log" 2>&1
            rc=$?
            if [ $rc -eq 77 ]; then
                row e2e "no device (rc 77)"; grep -m1 'no device' "$LOG/e2e.log"
            else
                np=$(grep -c '^PARITY [^ ]* PASS [0-9]*/' "$LOG/e2e.log")
                nf=$(grep -c '^PARITY [^ ]* FAIL [0-9]*/' "$LOG/e2e.log")
                row "e2e parity (rc $rc)" "$np passed, $nf failed"
                while read -r _ name verdict rest; do row "kv cache dtype $name (f32 refused, fp8 created)" "$verdict"; done < <(grep '^KVDTYPE ' "$LOG/e2e.log")
                while read -r _ name verdict rest; do row "features $name (sampling, penalties, logprobs, n)" "$verdict $rest"; done < <(grep -E '^FEATURES [^ ]+ (PASS|FAIL) [0-9]+/' "$LOG/e2e.log")
                grep -E '^FEATURES .* FAIL' "$LOG/e2e.log" | head -n 4
                while read -r _ name what verdict rest; do row "invariant $name $what" "$verdict ${rest:0:60}"; done < <(grep '^INVARIANT ' "$LOG/e2e.log")
                grep '^PARITY.*\(FAIL\|diverges\)' "$LOG/e2e.log" | head -n 8
                while read -r _ name verdict rest; do row "graph==eager $name" "$verdict ${rest:0:40}"; done < <(grep '^GRAPH ' "$LOG/e2e.log")
                while read -r _ name val unit pct; do row "$name" "$val $unit $pct"; done < <(grep '^e2e ' "$LOG/e2e.log")
            fi
        else
            row e2e "skipped (${LEFT}s left)"
        fi
    else
        row e2e "build FAIL"; tail -n 10 "$LOG/e2e_build.log"
    fi
else
    row e2e "not present"
fi
kill $GEN_PID 2>/dev/null

# 4. the independent oracle: Hugging Face transformers (in the GPU image) on
#    the same checkpoints, teacher-forced on each engine's greedy output
if ls "$B"/dump/*_cpu.bin >/dev/null 2>&1; then
    OARGS=()
    for n in tiny 0.6b; do [ -f "$B/dump/${n}_cpu.bin" ] && OARGS+=(--model "$n=$M/$n"); done
    timeout "$(cap 180 30)" python3 tests/gpu/hf_oracle.py "${OARGS[@]}" --dump "$B/dump" >"$LOG/oracle.log" 2>&1
    rc=$?
    if [ $rc -eq 77 ]; then row "hf oracle" "skipped: $(head -n1 "$LOG/oracle.log")"
    else
        while read -r _ name engine verdict rest; do row "hf oracle $name $engine" "$verdict ${rest:0:60}"; done \
            < <(grep '^ORACLE ' "$LOG/oracle.log")
        grep -q '^ORACLE ' "$LOG/oracle.log" || { row "hf oracle" "FAIL (rc $rc)"; tail -n 5 "$LOG/oracle.log"; }
    fi
fi

# 5. last, with what is left of the budget: the small shapes once more under
#    compute-sanitizer's memcheck (slow; a timeout reads "rc 124")
if [ -x $B/check_kernels ]; then
    SAN=$(command -v compute-sanitizer || ls "$CUDA_HOME"/bin/compute-sanitizer \
          "$CUDA_HOME"/compute-sanitizer/compute-sanitizer 2>/dev/null | head -n 1)
    if [ -n "$SAN" ]; then
        timeout "$(cap 240 40)" "$SAN" --tool memcheck --error-exitcode 3 $B/check_kernels --small \
            attention norms rope_kv gemm embed_copy penalties >"$LOG/memcheck.log" 2>&1
        rc=$?
        nerr=$(grep -m1 -o 'ERROR SUMMARY: [0-9]* error' "$LOG/memcheck.log")
        row "memcheck (small shapes)" "rc $rc, ${nerr:-no summary}"
        if [ -x $B/check_quant ]; then
            timeout "$(cap 120 0)" "$SAN" --tool memcheck --error-exitcode 3 $B/check_quant --small check \
                >"$LOG/memcheck_quant.log" 2>&1
            rc=$?
            nerr=$(grep -m1 -o 'ERROR SUMMARY: [0-9]* error' "$LOG/memcheck_quant.log")
            row "memcheck quant (small shapes)" "rc $rc, ${nerr:-no summary}"
        fi
    else
        row "memcheck" "compute-sanitizer not found"
    fi
fi

echo
echo "== qwinfer GPU run, commit $(cat "$LOG/commit.txt"), $(head -n1 "$LOG/gpu.txt"), $(( $(date +%s) - T0 ))s"
printf '%s\n' "${ROWS[@]}" | tee "$OUT/table.txt"
if [ "${PACK_LOGS:-0}" = 1 ]; then
    tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOG"
fi
