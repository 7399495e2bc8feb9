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
PYTHONPATH="$T/site" QWINFER_LIBRARY="$B/libqwinfer.so" QWINFER_CDEF= python3 -c "
import qwinfer
assert qwinfer.__file__.startswith('$T/site/'), qwinfer.__file__
assert qwinfer.CDEF_PATH.startswith('$T/site/'), qwinfer.CDEF_PATH
print('check_python: installed package', qwinfer.version(), 'with its own qwinfer_cdef.h')"
