#!/bin/sh
# make fuzz: build the harnesses of tests/fuzz/ with clang, libFuzzer and
# ASan+UBSan in BUILD-fuzz, then run each for SECONDS (default 60).
#   tools/fuzz.sh BUILD [SECONDS]
# Each harness grows its corpus in BUILD-fuzz/fuzz/corpus/<name> (kept between
# runs; the seeds of BUILD/fuzz/seeds/<name> and tests/fuzz/seeds/<name> are
# read too); an input that crashes it, leaks, trips a sanitizer, a failed
# invariant, a timeout (FUZZ_TIMEOUT seconds, default 10) or an allocation
# over 2 GB is written to BUILD-fuzz/fuzz/crashes/<name>/ and named at the
# end; the exit status is then 1. Reproduce one with
#   QWFUZZ_MODEL_DIR=BUILD/fuzz/model/single BUILD-fuzz/fuzz/fuzz_<name> FILE
# (or the regression driver: BUILD-asan/fuzz/fuzz_<name> FILE).
# Environment: FUZZ_CC (default clang), FUZZ_ARGS (more libFuzzer flags,
# e.g. "-jobs=2 -workers=2").
set -u
build=${1:-build}
secs=${2:-60}
make=${MAKE:-make}
cc=${FUZZ_CC:-clang}
names="safetensors config tokenizer serve_request"
cd "$(dirname "$0")/.." || exit 1

# ---- toolchain: clang with libFuzzer's runtime (Debian: clang,
# libclang-rt-14-dev) -------------------------------------------------------
probe_dir=$(mktemp -d)
probe() {
    printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }\n' \
        >"$probe_dir/p.c"
    "$cc" -fsanitize=fuzzer,address,undefined "$probe_dir/p.c" -o "$probe_dir/p" >/dev/null 2>&1
}
if ! probe; then
    pkgs="clang libclang-rt-14-dev"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "fuzz: installing $pkgs"
        apt-get update -qq >/dev/null 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $pkgs >/dev/null 2>&1
    fi
    if ! probe; then
        rm -rf "$probe_dir"
        echo "fuzz: $cc cannot link a libFuzzer harness; run: sudo apt-get install -y $pkgs" >&2
        exit 1
    fi
fi
rm -rf "$probe_dir"

# ---- seeds (the normal tree's tools) and libFuzzer harnesses ----------------
$make --no-print-directory -j2 BUILD="$build" fuzz-seeds || exit 1
# The SIMD kernel files without UBSan (KERNEL_CFLAGS, Makefile): clang's
# UBSan made each of them a 10-minute compile on a 2-core machine. ASan and
# the coverage instrumentation stay on them.
$make --no-print-directory -j2 BUILD="$build-fuzz" CC="$cc" OPT=-O1 CUDA=0 FUZZ_ENGINE=libfuzzer \
    SANITIZE="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
    KERNEL_CFLAGS=-fno-sanitize=undefined fuzz-build || exit 1

# ---- run -----------------------------------------------------------------------
status=0
stamp=$(mktemp)
for n in $names; do
    corpus="$build-fuzz/fuzz/corpus/$n"
    crashes="$build-fuzz/fuzz/crashes/$n"
    log="$build-fuzz/fuzz/$n.log"
    mkdir -p "$corpus" "$crashes"
    seeds=
    [ -d "$build/fuzz/seeds/$n" ] && seeds="$build/fuzz/seeds/$n"
    [ -d "tests/fuzz/seeds/$n" ] && seeds="$seeds tests/fuzz/seeds/$n"
    echo "fuzz_$n: ${secs}s, corpus $corpus"
    # -max_len: the seeds hold whole (tiny) models; -rss_limit_mb also sets the
    # allocation limit the regression driver copies (tests/fuzz/driver.c).
    QWFUZZ_MODEL_DIR="$build/fuzz/model/single" \
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
        "$build-fuzz/fuzz/fuzz_$n" -max_total_time="$secs" -max_len=65536 \
        -timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb=2048 -artifact_prefix="$crashes/" \
        -dict="tests/fuzz/$n.dict" -print_final_stats=1 ${FUZZ_ARGS:-} \
        "$corpus" $seeds >"$log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    echo "fuzz_$n: exit $rc, ${runs:-?} inputs run, $(ls "$corpus" | wc -l) in the corpus (log: $log)"
    found=$(find "$crashes" -type f -newer "$stamp" 2>/dev/null)
    if [ -n "$found" ] || [ $rc -ne 0 ]; then
        status=1
        grep -E -m 5 'ERROR|SUMMARY|qwfuzz:|runtime error|Test unit written' "$log"
        for f in $found; do
            echo "fuzz_$n: FAILING INPUT $f"
            echo "    reproduce: QWFUZZ_MODEL_DIR=$build/fuzz/model/single $build-fuzz/fuzz/fuzz_$n $f"
        done
    fi
done
rm -f "$stamp"
[ $status -eq 0 ] && echo "fuzz: no failure" || echo "fuzz: FAILURES above"
exit $status
