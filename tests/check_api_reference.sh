#!/bin/sh
# tests/check_api_reference.sh BUILD - docs/api-reference.md is what
# tools/gen-api-reference.py makes from today's qwinfer.h (else: run
# `make api-reference`), and it lists every function the header declares.
set -eu
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
python3 tools/gen-api-reference.py include/qwinfer.h "$T/ref.md"
if ! cmp -s "$T/ref.md" docs/api-reference.md; then
    diff -u docs/api-reference.md "$T/ref.md" | head -n 20
    echo "check_api_reference: docs/api-reference.md is stale: run 'make api-reference'"
    exit 1
fi
nf=$(grep -c '^QW_API' include/qwinfer.h)
nd=$(grep -c '^### `qw_' docs/api-reference.md)
[ "$nf" -eq "$nd" ] || { echo "check_api_reference: $nf functions declared, $nd documented"; exit 1; }
echo "check_api_reference: $nd functions, every enum and struct of qwinfer.h listed"
