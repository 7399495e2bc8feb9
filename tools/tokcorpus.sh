#!/bin/sh
# tokcorpus.sh OUTDIR - assemble a varied real-text corpus for the tokenizer
# benchmark from text that Debian packages ship, so that every machine can
# rebuild the same corpus (same package versions => same bytes) without a
# download outside the package manager.
#
# Why these sources: the earlier benchmark repeated one English paragraph,
# which the tokenizer's piece cache answers almost for free. Real serving
# input is a mix of prose, code, markup and CJK text; each file below is one
# such kind, and mixed.txt interleaves them in 4 KiB slices.
#
#   english.txt   Linux man-pages section 7 (package manpages), rendered to
#                 plain text by man(1): technical English prose
#   chinese.txt   the Debian Reference in Simplified Chinese (package
#                 debian-reference-zh-cn, its plain-text edition): Chinese
#                 prose mixed with shell commands and paths
#   code_c.txt    the Linux kernel's user-space C headers (package
#                 linux-libc-dev), comments and all
#   code_py.txt   the Python standard library (package libpython3.11-stdlib)
#   json.txt      ISO code tables as JSON (package iso-codes), with names in
#                 their Unicode spellings
#   mixed.txt     all of the above, interleaved
#
# Each part is cut at a UTF-8 boundary to at most PART_BYTES (default 1 MB).
# Writes OUTDIR/sources.txt with the package versions used.
set -eu
out=${1:?usage: tools/tokcorpus.sh OUTDIR}
part_bytes=${PART_BYTES:-1000000}
pkgs="manpages debian-reference-zh-cn iso-codes libpython3.11-stdlib linux-libc-dev man-db"

missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "tokcorpus: installing$missing"
        apt-get update -qq >/dev/null 2>&1 || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null 2>&1 || {
            echo "tokcorpus: apt-get install failed; run: sudo apt-get install -y$missing" >&2
            exit 1
        }
    else
        echo "tokcorpus: missing Debian packages; run: sudo apt-get install -y$missing" >&2
        exit 1
    fi
fi

mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Keep only files that are valid UTF-8 (the encoder refuses anything else).
utf8_ok() { iconv -f UTF-8 -t UTF-8 "$1" >/dev/null 2>&1; }

# cut FILE to at most part_bytes, backing off to a UTF-8 character start
cut_part() {
    python3 - "$1" "$2" "$part_bytes" <<'EOF'
import sys
src, dst, cap = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = open(src, 'rb').read()[:cap]
while data and (data[-1] & 0xC0) == 0x80:
    data = data[:-1]
if data and data[-1] >= 0xC0:
    data = data[:-1]
open(dst, 'wb').write(data)
EOF
}

# english: section 7 pages, sorted by name, rendered at 80 columns without
# overstrike or hyphenation
: >"$tmp/en"
for page in $(dpkg -L manpages | grep '/man7/.*\.7\.gz$' | sort); do
    MANWIDTH=80 MAN_KEEP_FORMATTING= man --nh --nj -E UTF-8 -l "$page" 2>/dev/null | col -bx >>"$tmp/en" || true
    [ "$(wc -c <"$tmp/en")" -ge "$part_bytes" ] && break
done
cut_part "$tmp/en" "$out/english.txt"

zcat /usr/share/debian-reference/debian-reference.zh-cn.txt.gz >"$tmp/zh"
cut_part "$tmp/zh" "$out/chinese.txt"

: >"$tmp/c"
for f in $(dpkg -L linux-libc-dev | grep '^/usr/include/linux/[^/]*\.h$' | sort); do
    utf8_ok "$f" && cat "$f" >>"$tmp/c"
    [ "$(wc -c <"$tmp/c")" -ge "$part_bytes" ] && break
done
cut_part "$tmp/c" "$out/code_c.txt"

: >"$tmp/py"
for f in $(ls /usr/lib/python3.11/*.py | sort); do
    utf8_ok "$f" && cat "$f" >>"$tmp/py"
    [ "$(wc -c <"$tmp/py")" -ge "$part_bytes" ] && break
done
cut_part "$tmp/py" "$out/code_py.txt"

cat /usr/share/iso-codes/json/iso_3166-2.json /usr/share/iso-codes/json/iso_639-3.json >"$tmp/json"
cut_part "$tmp/json" "$out/json.txt"

# mixed: 4 KiB slices taken in turn from each part (cut at UTF-8 boundaries)
python3 - "$out" <<'EOF'
import sys, os
out = sys.argv[1]
parts = [open(os.path.join(out, n), 'rb').read()
         for n in ('english.txt', 'chinese.txt', 'code_c.txt', 'code_py.txt', 'json.txt')]
pos = [0] * len(parts)
res = bytearray()
def step(b, p):
    e = min(p + 4096, len(b))
    while e < len(b) and (b[e] & 0xC0) == 0x80:
        e += 1
    return e
while any(pos[i] < len(parts[i]) for i in range(len(parts))):
    for i, b in enumerate(parts):
        if pos[i] < len(b):
            e = step(b, pos[i])
            res += b[pos[i]:e]
            pos[i] = e
open(os.path.join(out, 'mixed.txt'), 'wb').write(res)
EOF

for p in $pkgs; do dpkg-query -W -f='${Package} ${Version}\n' "$p"; done >"$out/sources.txt"
echo "tokcorpus: wrote $out"
wc -c "$out"/*.txt
