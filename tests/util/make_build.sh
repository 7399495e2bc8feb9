# Sourced by the tests/check_*.sh scripts that run make on an existing build
# tree (make install, say): do it with the configuration that tree was built
# with, so the config stamp sees no change and nothing is rebuilt behind the
# suite's back.
#
# make_build BUILD ARGS...: run make for BUILD with the caller's command-line
# variables (MAKEFLAGS' "-- VAR=value ..." part, when under `make test`) and
# the CUDA setting recorded in BUILD/config.stamp; never the parent make's
# jobserver or flags (-n, -k, -j...). BUILD and ARGS win over both.
make_build() {
    mb_build=$1
    shift
    mb_vars=$(printf '%s' "${MAKEFLAGS:-}" | sed -n 's/^\(.* \)\{0,1\}-- //p')
    mb_cuda=$(sed -n 's/^CUDA=//p' "$mb_build/config.stamp" 2>/dev/null)
    env -u MFLAGS -u MAKELEVEL MAKEFLAGS="${mb_vars:+-- $mb_vars}" \
        make --no-print-directory ${mb_cuda:+CUDA=$mb_cuda} BUILD="$mb_build" "$@"
}
