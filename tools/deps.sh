#!/bin/sh
# Check the build/test dependencies and install what is missing, when this
# process may (root with apt-get, pip). Otherwise print the one line to run.
#   jansson      JSON parsing of config.json / safetensors headers
#   libxxhash    prefix-cache block hashes
#   libpcre2-8   the tokenizer's pre-tokenizer regex (PCRE2 with JIT)
#   libutf8proc  NFC normalisation of text before tokenizing
#   criterion    the C test framework
#   numpy        the float64 reference forward pass in tests/reference/
#   tokenizers   Hugging Face tokenizers (pip): expected ids for tokenizer tests
set -u
PKG_CONFIG=${PKG_CONFIG:-pkg-config}
missing_deb=""
command -v "$PKG_CONFIG" >/dev/null 2>&1 || missing_deb="$missing_deb pkg-config"
for pair in jansson:libjansson-dev libxxhash:libxxhash-dev libpcre2-8:libpcre2-dev \
            libutf8proc:libutf8proc-dev criterion:libcriterion-dev; do
    pc=${pair%%:*}
    deb=${pair#*:}
    if ! "$PKG_CONFIG" --exists "$pc" 2>/dev/null; then
        missing_deb="$missing_deb $deb"
    fi
done
command -v python3 >/dev/null 2>&1 || missing_deb="$missing_deb python3 python3-pip"

if [ -n "$missing_deb" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "deps: installing$missing_deb"
        apt-get update -qq >/dev/null 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing_deb >/dev/null 2>&1 || {
            echo "deps: apt-get install failed; run: sudo apt-get install -y$missing_deb" >&2
            exit 1
        }
    else
        echo "deps: missing Debian packages; run: sudo apt-get install -y$missing_deb" >&2
        exit 1
    fi
fi

if ! python3 -c 'import numpy' >/dev/null 2>&1; then
    echo "deps: installing numpy"
    python3 -m pip install -q numpy >/dev/null 2>&1 ||
        python3 -m pip install -q --break-system-packages numpy >/dev/null 2>&1 || {
            echo "deps: numpy missing; run: python3 -m pip install numpy" >&2
            exit 1
        }
fi
if ! python3 -c 'import tokenizers' >/dev/null 2>&1; then
    echo "deps: installing tokenizers"
    python3 -m pip install -q tokenizers >/dev/null 2>&1 ||
        python3 -m pip install -q --break-system-packages tokenizers >/dev/null 2>&1 || {
            echo "deps: tokenizers missing (tokenizer tests will skip); run: python3 -m pip install tokenizers" >&2
        }
fi
echo "deps: ok"
