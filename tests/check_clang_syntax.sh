#!/bin/sh
# The sources `make fuzz` compiles with clang (tests/fuzz, tools/fuzz.sh)
# parse with clang too: gcc and clang accept different sets of GNU
# extensions (clang 14 rejects __builtin_cpu_supports("f16c"), which gcc
# takes), and make test builds with gcc only, so a gcc-only construct
# would otherwise surface only when someone next runs `make fuzz`.
# -fsyntax-only over the library, tools, qw-serve and fuzz harness sources
# with the project's warning flags; a few seconds. Where clang is not
# installed (CI installs only what `make deps` does) it says so and passes.
#   tests/check_clang_syntax.sh [BUILD]
set -u
cc=${FUZZ_CC:-clang}
cd "$(dirname "$0")/.." || exit 1
if ! command -v "$cc" >/dev/null 2>&1; then
    echo "check_clang_syntax: skipped: $cc is not installed (make fuzz installs it)"
    exit 0
fi
status=0
for f in lib/*.c lib/cpu/*.c tools/*.c tools/qw-serve/*.c tests/fuzz/*.c; do
    out=$("$cc" -std=c11 -D_GNU_SOURCE -fsyntax-only -Wall -Wextra -Wno-unused-parameter \
          -Iinclude -iquote lib -iquote tests -iquote tools/qw-serve "$f" 2>&1)
    if echo "$out" | grep -q 'error:'; then
        echo "$out" | head -n 20
        status=1
    fi
done
[ $status -eq 0 ] && echo "check_clang_syntax: every source parses with $("$cc" --version | head -n 1)"
exit $status
