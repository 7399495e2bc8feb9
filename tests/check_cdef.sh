#!/bin/sh
# tests/check_cdef.sh BUILD - include/qwinfer_cdef.h is what tools/gen-cdef.sh
# makes from today's qwinfer.h (else: run `make cdef`), cffi's cdef() parses
# it, and every public struct has the same size and field offsets through
# cffi as through the C compiler (so a binding built on the cdef reads the
# library's memory right).
set -eu
B=${1:-build}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
sh tools/gen-cdef.sh include/qwinfer.h "$T/cdef.h"
if ! cmp -s "$T/cdef.h" include/qwinfer_cdef.h; then
    diff -u include/qwinfer_cdef.h "$T/cdef.h" | head -n 20
    echo "check_cdef: include/qwinfer_cdef.h is stale: run 'make cdef'"
    exit 1
fi
# sizes and offsets from the C compiler, for every struct typedef in the header
STRUCTS=$(sed -n 's/^typedef struct \(qw_[a-z_]*\) {$/\1/p' include/qwinfer_cdef.h)
{
    printf '%s\n' '#include <stddef.h>' '#include <stdio.h>' '#include "qwinfer.h"' 'int main(void) {'
    for s in $STRUCTS; do
        printf '    printf("%s sizeof %%zu\\n", sizeof(%s));\n' "$s" "$s"
        # field names: lines "    type name;" or "    type name[N];" inside the struct
        sed -n "/^typedef struct $s {\$/,/^} $s;\$/p" include/qwinfer_cdef.h | sed '1d;$d' |
            sed 's/\[.*//; s/;.*//; s/.*[ *]//' | while read -r f; do
                [ -n "$f" ] && printf '    printf("%s %s %%zu\\n", offsetof(%s, %s));\n' "$s" "$f" "$s" "$f"
            done
    done
    printf '%s\n' '    return 0;' '}'
} >"$T/layout.c"
${CC:-cc} -std=c11 -Iinclude "$T/layout.c" -o "$T/layout"
"$T/layout" >"$T/c.txt"
python3 - "$T/cdef.h" "$T/c.txt" <<'PY'
import sys, cffi
ffi = cffi.FFI()
ffi.cdef(open(sys.argv[1]).read())
bad = 0
n = 0
for line in open(sys.argv[2]):
    s, field, value = line.split()
    got = ffi.sizeof(s) if field == "sizeof" else ffi.offsetof(s, field)
    n += 1
    if got != int(value):
        print(f"check_cdef: {s}.{field}: C says {value}, cffi says {got}")
        bad += 1
print(f"check_cdef: cffi parses qwinfer_cdef.h; {n} sizes/offsets of public structs agree with C" if not bad else "")
sys.exit(1 if bad else 0)
PY
