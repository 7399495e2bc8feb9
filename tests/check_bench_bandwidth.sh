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
# headers of a tied and an untied model. --probe-every N: a probe before
# every N decode steps and one after the last, each stretch's fraction in
# run order, the median of those reported, the probe's buffer outside the
# peak RSS; refused for CUDA, the serving form and N < 0.
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
"$b/qw-bench" --model "$dir/m" --threads 1 --num-requests 2 --input-len 8 --output-len 16 \
    --temperature 0 --no-limits --probe-every 4 --json >"$dir/pp.json" 2>"$dir/err" || fail "qw-bench --probe-every: $(cat "$dir/err")"
python3 - "$dir/pp.json" <<'PY' || fail "--probe-every: see above"
import json, math, sys
run = json.load(open(sys.argv[1]))["runs"][0]
probes = run["paired_probe_read_bytes_per_s"]
fr = run["paired_probe_stretch_fractions"]
steps = run["decode_steps"]
print(f"check_bench_bandwidth: --probe-every 4 over {steps} decode steps: {len(probes)} probes, "
      f"stretches {fr}, median {run['decode_fraction_of_paired_probes']}, peak RSS {run['peak_rss_bytes'] / 2**20:.1f} MiB")
ok = steps == 15 and len(probes) == math.ceil(steps / 4) + 1 and all(p > 0 for p in probes)
ok = ok and len(fr) == len(probes) - 1 and run["paired_probe_stretches"] == len(fr) and all(f > 0 for f in fr)
s = sorted(fr)
ok = ok and run["decode_fraction_of_paired_probes"] == s[math.ceil(len(s) / 2) - 1]
ok = ok and run["decode_fraction_of_paired_probes_min"] == s[0] and run["decode_fraction_of_paired_probes_max"] == s[-1]
ok = ok and run["paired_probe_seconds"] > 0 and run["peak_rss_bytes"] < 128 * 2**20   # the probe maps 256 MiB
sys.exit(0 if ok else 1)
PY
for bad in "--probe-every -1" "--probe-every 4 --device cuda:0"; do
    "$b/qw-bench" --model "$dir/m" --num-requests 1 --no-limits $bad >/dev/null 2>&1 && fail "qw-bench accepted $bad"
done
"$b/qw-bench" --model "$dir/m" --prompts /dev/null --request-rate inf --probe-every 4 >/dev/null 2>&1 &&
    fail "qw-bench accepted --probe-every in the serving form"
echo "check_bench_bandwidth: --probe-every checked"
