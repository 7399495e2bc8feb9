#!/bin/sh
# qw-bench's read-bandwidth limit: probed before the runs and again after
# each, the larger is the limit the decode fraction is judged against (a
# VM's memory swings between phases within seconds, and a probe that landed
# in a slow one made decode read "140% of bandwidth"). Checks, on a tiny
# model with the limits measured: the JSON's limit is the larger probe, the
# decode fraction is decode bytes/s over that limit, and the engine's peak
# RSS does not include the probe's 512 MiB buffer. The bytes a decode step
# reads (stream_bytes) are every tensor's bytes, less an untied model's
# embedding (only its rows are gathered): checked against the safetensors
# headers of a tied and an untied model.
#   tests/check_bench_bandwidth.sh BUILD
set -eu
b=${1:-build}/bin
fail() { echo "check_bench_bandwidth: $*"; exit 1; }
[ -x "$b/qw-bench" ] && [ -x "$b/qw-makemodel" ] || fail "missing $b/qw-bench or $b/qw-makemodel"
command -v python3 >/dev/null || fail "python3 is needed (make deps installs it)"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$b/qw-makemodel" --shape tiny --dtype bf16 --seed 5 --out "$dir/m" >/dev/null || fail "qw-makemodel"
"$b/qw-bench" --model "$dir/m" --threads 1 --num-requests 2 --input-len 8 --output-len 16 \
    --temperature 0 --json >"$dir/out.json" 2>"$dir/err" || fail "qw-bench: $(cat "$dir/err")"
python3 - "$dir/out.json" <<'PY' || fail "see above"
import json, sys
out = json.load(open(sys.argv[1]))
run = out["runs"][0]
before = out["read_bandwidth_bytes_per_s"]
after = run["read_bandwidth_after_run_bytes_per_s"]
limit = run["read_bandwidth_limit_bytes_per_s"]
frac = run["decode_fraction_of_bandwidth"]
rss = run["peak_rss_bytes"]
print(f"check_bench_bandwidth: probes {before / 1e9:.2f} before, {after / 1e9:.2f} after, "
      f"limit {limit / 1e9:.2f} GB/s; decode fraction {frac:.4f}; peak RSS {rss / 2**20:.1f} MiB")
ok = before > 0 and after > 0 and limit == max(before, after)
ok = ok and abs(frac - run["decode_bytes_per_s"] / limit) <= 1e-4 * frac
ok = ok and rss < 256 * 2**20   # the probe maps 512 MiB
sys.exit(0 if ok else 1)
PY
"$b/qw-makemodel" --shape tiny --dtype bf16 --seed 5 --untied --out "$dir/u" >/dev/null || fail "qw-makemodel --untied"
for m in m u; do
    "$b/qw-bench" --model "$dir/$m" --threads 1 --num-requests 1 --input-len 4 --output-len 2 \
        --no-limits --json >"$dir/$m.json" 2>"$dir/err" || fail "qw-bench: $(cat "$dir/err")"
done
python3 - "$dir" <<'PY' || fail "stream_bytes: see above"
import json, struct, sys
d = sys.argv[1]
ok = True
for m, untied in (("m", False), ("u", True)):
    raw = open(f"{d}/{m}/model.safetensors", "rb").read()
    (hl,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + hl])
    sizes = {k: v["data_offsets"][1] - v["data_offsets"][0] for k, v in hdr.items() if k != "__metadata__"}
    want = sum(sizes.values()) - (sizes["model.embed_tokens.weight"] if untied else 0)
    got = json.load(open(f"{d}/{m}.json"))["stream_bytes"]
    print(f"check_bench_bandwidth: {'untied' if untied else 'tied'} stream_bytes {got}, headers say {want}")
    ok = ok and got == want
sys.exit(0 if ok else 1)
PY
