#!/bin/sh
# Check the build/test dependencies and install what is missing, when this
# process may (root with apt-get; pip only where Debian has no package).
# Otherwise print the one line to run. Works on a fresh Debian 12 machine
# that has nothing but `make`: no compiler, no pkg-config, no python.
#   tools/deps.sh           everything `make test` needs
#   tools/deps.sh --build   only what building the library, tools and
#                           examples needs (`make demo`)
# Build:
#   gcc, libc6-dev  a C11 compiler (cc) and the C library headers
#   pkg-config      finds the libraries below (the Makefile asks it)
#   jansson         JSON parsing of config.json / safetensors headers
#   libxxhash       prefix-cache block hashes
#   libpcre2-8      the tokenizer's pre-tokenizer regex (PCRE2 with JIT)
#   libutf8proc     NFC normalisation of text before tokenizing
#   libmicrohttpd   qw-serve's HTTP server (Debian's libmicrohttpd-dev): GNU,
#                   in Debian main, threads, streamed responses, disconnect
#                   notifications and quiesce for draining
# Test:
#   criterion       the C test framework
#   numpy           the float64 reference forward pass in tests/reference/
#                   (Debian's python3-numpy; pip only when that cannot serve)
#   cffi            parses include/qwinfer_cdef.h in tests/check_cdef.sh, as
#                   the Python binding does (Debian's python3-cffi)
#   golang-go       tests/check_go.sh: go vet and go test -race of bindings/go
#   pip, setuptools, wheel, pytest
#                   tests/check_python.sh installs bindings/python with pip
#                   (offline) and runs its pytest suite (Debian packages)
#   tokenizers      Hugging Face tokenizers (pip; Debian 12 has no package):
#                   expected ids for tokenizer tests, which skip without it
#   requests, prometheus_client, yaml
#                   tests/check_serve.sh: TGI requests to qw-serve, parsing its
#                   /metrics, the Kubernetes example's YAML (Debian's
#                   python3-requests, python3-prometheus-client, python3-yaml)
#   openai          the official OpenAI Python client (pip; Debian 12 has no
#                   package): tests/serve/ drives qw-serve with it (required)
set -u
mode=test
case "${1:-}" in
    --build) mode=build ;;
    "") ;;
    *) echo "deps: unknown argument '$1' (use --build or nothing)" >&2; exit 2 ;;
esac
PKG_CONFIG=${PKG_CONFIG:-pkg-config}
can_apt=0
[ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && can_apt=1
apt_updated=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# apt_install PKG...: install as root through apt-get; 1 when not possible.
apt_install() {
    [ "$can_apt" = 1 ] || return 1
    echo "deps: installing$(printf ' %s' "$@") (apt-get)"
    if [ "$apt_updated" = 0 ]; then
        # A fresh machine has no package lists yet.
        apt-get update -qq >"$log" 2>&1 || { echo "deps: apt-get update failed:" >&2; tail -n 5 "$log" >&2; }
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >"$log" 2>&1 || {
        echo "deps: apt-get install$(printf ' %s' "$@") failed:" >&2
        tail -n 10 "$log" >&2
        return 1
    }
}

# ---- Debian packages ------------------------------------------------------------
missing_deb=""
command -v cc >/dev/null 2>&1 || missing_deb="$missing_deb gcc libc6-dev"
command -v make >/dev/null 2>&1 || missing_deb="$missing_deb make"
have_pc=1
command -v "$PKG_CONFIG" >/dev/null 2>&1 || { have_pc=0; missing_deb="$missing_deb pkg-config"; }
pairs="jansson:libjansson-dev libxxhash:libxxhash-dev libpcre2-8:libpcre2-dev libutf8proc:libutf8proc-dev"
pairs="$pairs libmicrohttpd:libmicrohttpd-dev"
[ "$mode" = test ] && pairs="$pairs criterion:libcriterion-dev"
for pair in $pairs; do
    pc=${pair%%:*}
    deb=${pair#*:}
    # Without pkg-config nothing can be checked: ask for every package (apt
    # skips those already installed).
    if [ "$have_pc" = 0 ] || ! "$PKG_CONFIG" --exists "$pc" 2>/dev/null; then
        missing_deb="$missing_deb $deb"
    fi
done
if [ "$mode" = test ]; then
    # nm/readelf (ABI and link checks) come with binutils, a gcc dependency.
    command -v nm >/dev/null 2>&1 || missing_deb="$missing_deb binutils"
    command -v python3 >/dev/null 2>&1 || missing_deb="$missing_deb python3"
fi
if [ -n "$missing_deb" ]; then
    # shellcheck disable=SC2086 # a word list on purpose
    apt_install $missing_deb || {
        echo "deps: missing Debian packages; run: sudo apt-get install -y$missing_deb" >&2
        exit 1
    }
fi
if [ "$mode" = build ]; then
    echo "deps: ok (build)"
    exit 0
fi

# ---- Python modules ---------------------------------------------------------------
has_py() { python3 -c "import $1" >/dev/null 2>&1; }
# pip_install MODULE: pip for the python3 on PATH; Debian's system python
# refuses (PEP 668) unless told, which is the last resort.
pip_install() {
    if ! python3 -m pip --version >/dev/null 2>&1; then
        apt_install python3-pip || return 1
    fi
    echo "deps: installing $1 (pip)"
    python3 -m pip install -q "$1" >"$log" 2>&1 ||
        python3 -m pip install -q --break-system-packages "$1" >"$log" 2>&1 || {
            tail -n 5 "$log" >&2
            return 1
        }
}
if ! has_py numpy; then
    # Debian's package serves when python3 on PATH is the system python.
    apt_install python3-numpy || true
    has_py numpy || pip_install numpy || true
    has_py numpy || {
        echo "deps: numpy missing; run: sudo apt-get install -y python3-numpy (or python3 -m pip install numpy)" >&2
        exit 1
    }
fi
if ! has_py cffi; then
    apt_install python3-cffi || true
    has_py cffi || pip_install cffi || true
    has_py cffi || {
        echo "deps: cffi missing; run: sudo apt-get install -y python3-cffi (or python3 -m pip install cffi)" >&2
        exit 1
    }
fi
for m in pytest:python3-pytest setuptools:python3-setuptools wheel:python3-wheel; do
    has_py "${m%%:*}" || apt_install "${m#*:}" || true
    has_py "${m%%:*}" || pip_install "${m%%:*}" || true
    has_py "${m%%:*}" || {
        echo "deps: ${m%%:*} missing; run: sudo apt-get install -y ${m#*:} (or python3 -m pip install ${m%%:*})" >&2
        exit 1
    }
done
if ! command -v go >/dev/null 2>&1; then
    apt_install golang-go || true
    command -v go >/dev/null 2>&1 || {
        echo "deps: go missing; run: sudo apt-get install -y golang-go" >&2
        exit 1
    }
fi
if ! python3 -m pip --version >/dev/null 2>&1; then
    apt_install python3-pip || true
    python3 -m pip --version >/dev/null 2>&1 || {
        echo "deps: pip missing; run: sudo apt-get install -y python3-pip" >&2
        exit 1
    }
fi
# module:Debian package:pip name
for m in requests:python3-requests:requests prometheus_client:python3-prometheus-client:prometheus-client \
    yaml:python3-yaml:PyYAML; do
    mod=${m%%:*}
    rest=${m#*:}
    deb=${rest%%:*}
    pipname=${rest#*:}
    has_py "$mod" || apt_install "$deb" || true
    has_py "$mod" || pip_install "$pipname" || true
    has_py "$mod" || {
        echo "deps: $mod missing; run: sudo apt-get install -y $deb (or python3 -m pip install $pipname)" >&2
        exit 1
    }
done
if ! has_py openai; then
    pip_install openai || true
    has_py openai || {
        echo "deps: openai missing; run: python3 -m pip install openai" >&2
        exit 1
    }
fi
if ! has_py tokenizers; then
    pip_install tokenizers || true
    has_py tokenizers ||
        echo "deps: tokenizers missing (tokenizer tests will skip); run: python3 -m pip install tokenizers" >&2
fi
echo "deps: ok"
