#!/bin/sh
# ABI guard against the committed baseline (tests/abi/baseline.txt): every
# exported symbol, enum value and struct field offset recorded there must
# still be the same. Additions are fine; after adding API, refresh the
# baseline with `sh tests/check_abi.sh BUILD --update` and commit it.
set -eu
build=${1:-build}
base=tests/abi/baseline.txt
cur="$build/abi-current.txt"
lib="$build/libqwinfer.so.0.1.0"
cc -std=c11 -Iinclude -o "$build/abi-layout" tests/abi/layout.c
{
    "$build/abi-layout"
    # enum constants with explicit values, as written in the header
    grep -oE '\bQW_[A-Z0-9_]+ = -?[0-9]+' include/qwinfer.h | sed 's/^/enum /'
    nm -D --defined-only "$lib" | awk '{print $3}' | grep '^qw_' | sed 's/^/symbol /'
} | sort -u > "$cur"
if [ "${2:-}" = "--update" ]; then
    cp "$cur" "$base"
    echo "ABI baseline updated: $(wc -l < "$base") facts"
    exit 0
fi
missing=$(comm -23 "$base" "$cur")
if [ -n "$missing" ]; then
    echo "ABI break: these baseline facts changed or vanished:"
    echo "$missing"
    exit 1
fi
echo "ABI ok: $(wc -l < "$base") baseline facts hold, $(comm -13 "$base" "$cur" | wc -l) new"
