#!/bin/sh
# tests/check_python.sh BUILD - the Python binding as a user gets it: `pip
# install ./bindings/python` (into a temporary target, offline: no build
# isolation, no dependencies fetched), then its pytest suite against BUILD's
# library with the installed package (and its copy of qwinfer_cdef.h).
set -eu
B=${1:-build}
case "$B" in /*) ;; *) B="$PWD/$B" ;; esac
T=$(mktemp -d)
trap 'rm -rf "$T"; rm -rf bindings/python/build bindings/python/qwinfer.egg-info bindings/python/qwinfer/qwinfer_cdef.h' EXIT
if ! python3 -m pip install -q --no-build-isolation --no-deps --target "$T/site" ./bindings/python >"$T/pip.log" 2>&1; then
    cat "$T/pip.log"
    echo "check_python: pip install ./bindings/python failed"
    exit 1
fi
[ -f "$T/site/qwinfer/qwinfer_cdef.h" ] || { echo "check_python: the package lacks qwinfer_cdef.h"; exit 1; }
cmp -s "$T/site/qwinfer/qwinfer_cdef.h" include/qwinfer_cdef.h || { echo "check_python: packaged cdef differs"; exit 1; }
# tests import the installed package: not the source tree, not a stale cdef
cd "$T"
PYTHONPATH="$T/site" QWINFER_BUILD="$B" QWINFER_LIBRARY="$B/libqwinfer.so" QWINFER_CDEF= \
    python3 -m pytest -q -p no:cacheprovider "$OLDPWD/bindings/python/tests" >"$T/pytest.log" 2>&1 ||
    { tail -n 40 "$T/pytest.log"; echo "check_python: pytest failed"; exit 1; }
tail -n 1 "$T/pytest.log"
# the example program, as the README shows it (text, chat, several requests)
"$B/bin/qw-makemodel" --shape tiny --dtype bf16 --out "$T/tiny" >/dev/null
for args in "" "--chat --no-think" "--num-requests 3"; do
    # shellcheck disable=SC2086
    PYTHONPATH="$T/site" QWINFER_LIBRARY="$B/libqwinfer.so" QWINFER_CDEF= python3 \
        "$OLDPWD/bindings/python/examples/qw_generate.py" --model "$T/tiny" --prompt "hello" --max-tokens 8 \
        --seed 1 $args >"$T/ex.out" 2>"$T/ex.err" ||
        { cat "$T/ex.err"; echo "check_python: examples/qw_generate.py $args failed"; exit 1; }
    grep -q "tokens generated" "$T/ex.err" || { cat "$T/ex.err"; echo "check_python: no summary"; exit 1; }
done
echo "check_python: examples/qw_generate.py ran (text, chat, 3 requests)"

# The C side of a Python run leaks nothing: the same tests against the
# ASan+UBSan library that `make test` builds beside BUILD, with LeakSanitizer
# on. Python and cffi keep memory at exit on purpose; with two frames per
# allocation stack, leaks whose allocating caller is in python3.x, libffi or
# _cffi_backend are suppressed, while a leak allocated by libqwinfer (whose
# frames are not in those modules) is reported and fails the check.
A="$B-asan"
if [ -f "$A/libqwinfer.so" ] && [ -x "$A/bin/qw-makemodel" ]; then
    PYBIN=$(python3 -c 'import sys; print(sys.executable)')   # not a shell shim
    printf '%s\n' 'leak:python3' 'leak:libpython3' 'leak:_cffi_backend' 'leak:libffi' >"$T/lsan.supp"
    if ! LD_PRELOAD="$(${CC:-cc} -print-file-name=libasan.so):$(${CC:-cc} -print-file-name=libubsan.so)" \
        ASAN_OPTIONS=detect_leaks=1:malloc_context_size=2:fast_unwind_on_malloc=1 \
        LSAN_OPTIONS="suppressions=$T/lsan.supp:print_suppressions=0" \
        PYTHONPATH="$T/site" QWINFER_BUILD="$A" QWINFER_LIBRARY="$A/libqwinfer.so" QWINFER_CDEF= \
        "$PYBIN" -m pytest -q -p no:cacheprovider "$OLDPWD/bindings/python/tests" >"$T/asan.log" 2>&1; then
        tail -n 40 "$T/asan.log"
        echo "check_python: the Python tests against the ASan library failed or leaked"
        exit 1
    fi
    ! grep -q 'LeakSanitizer\|AddressSanitizer\|runtime error' "$T/asan.log" ||
        { tail -n 40 "$T/asan.log"; echo "check_python: sanitizer report"; exit 1; }
    echo "check_python: no leak or sanitizer report from libqwinfer under the Python tests ($(tail -n 1 "$T/asan.log"))"
fi
PYTHONPATH="$T/site" QWINFER_LIBRARY="$B/libqwinfer.so" QWINFER_CDEF= python3 -c "
import qwinfer
assert qwinfer.__file__.startswith('$T/site/'), qwinfer.__file__
assert qwinfer.CDEF_PATH.startswith('$T/site/'), qwinfer.CDEF_PATH
print('check_python: installed package', qwinfer.version(), 'with its own qwinfer_cdef.h')"
