#!/bin/sh
# tests/check_go.sh BUILD - the Go module bindings/go against BUILD's
# library, found the way a user's cgo build finds it (#cgo pkg-config:
# qwinfer, here through a qwinfer.pc that points at BUILD): go vet, the tests
# under the race detector, and the example program (text, chat, 3 requests).
set -eu
B=${1:-build}
case "$B" in /*) ;; *) B="$PWD/$B" ;; esac
command -v go >/dev/null || { echo "check_go: no go toolchain (make deps installs golang-go)"; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/pc"
cat >"$T/pc/qwinfer.pc" <<PC
Name: qwinfer
Description: qwinfer from the build tree $B
Version: 0.1.0
Cflags: -I$PWD/include
Libs: -L$B -lqwinfer -Wl,-rpath,$B
PC
export PKG_CONFIG_PATH="$T/pc" GOPATH="$B/go" GOCACHE="$B/go/cache" GOFLAGS=-mod=mod GOPROXY=off
cd bindings/go
go vet ./... || { echo "check_go: go vet failed"; exit 1; }
QWINFER_BUILD="$B" go test -race -count=1 ./... >"$T/test.log" 2>&1 ||
    { cat "$T/test.log"; echo "check_go: go test -race failed"; exit 1; }
tail -n 1 "$T/test.log"
go build -o "$T/qw-generate-go" ./examples/qw-generate
"$B/bin/qw-makemodel" --shape tiny --dtype bf16 --out "$T/tiny" >/dev/null
for args in "" "--chat --no-think" "--num-requests 3"; do
    # shellcheck disable=SC2086
    "$T/qw-generate-go" --model "$T/tiny" --prompt hello --max-tokens 8 --seed 1 $args >"$T/ex.out" 2>"$T/ex.err" ||
        { cat "$T/ex.err"; echo "check_go: examples/qw-generate $args failed"; exit 1; }
done
echo "check_go: go vet clean, go test -race ok, examples/qw-generate ran (text, chat, 3 requests)"
