#!/usr/bin/env bash
# Codec throughput against memcpy and PyTorch CPU; see bench/README.md "Codec throughput".
#
#   bench/compression_bench.sh                                   # 1M and 25M, 1 and 2 threads
#   bench/compression_bench.sh --sizes 25000000 --threads 2 --reps 15
#   NO_BUILD=1 BUILD_DIR=build-native bench/compression_bench.sh  # another build, no rebuild
#   bench/compression_bench.sh --isa portable                    # the codecs' portable loops
#
# Builds compression_bench in ${BUILD_DIR:-build} (which must be configured already),
# runs it and bench/compression_bench.py with the same sizes, threads and repetitions,
# and prints one combined markdown table per size. PyTorch comes from ${TORCH_PYTHON}
# (default: /usr/bin/python3, where Debian's python3-torch lives, else python3); when
# it cannot import torch the torch columns are left empty and the script says so.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
sizes="1000000,25000000"
threads="1,2"
reps=9
warmup=2
keep=""
isa=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --sizes) sizes="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;   # directory to keep the raw JSON lines in
    --isa) isa=(--isa "$2"); shift 2 ;;  # portable, avx2 or avx512 (default: the best the CPU has)
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

if [[ -z "${NO_BUILD:-}" ]]; then
  ninja -C "$build" -j2 compression_bench >&2
fi

if [[ -n "${TORCH_PYTHON:-}" ]]; then
  py="$TORCH_PYTHON"
elif [[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  py=/usr/bin/python3
else
  py=python3
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "# compression_bench: sizes=$sizes threads=$threads reps=$reps warmup=$warmup" >&2
"$build/bin/compression_bench" --sizes "$sizes" --threads "$threads" --reps "$reps" \
  --warmup "$warmup" --json "$tmp/cpp.jsonl" "${isa[@]}" >&2

echo "# torch ($py)" >&2
if ! "$py" "$here/compression_bench.py" --sizes "$sizes" --threads "$threads" --reps "$reps" \
     --warmup "$warmup" > "$tmp/torch.jsonl"; then
  echo "# PyTorch is not available to $py: torch columns left empty" >&2
  echo "#   (install Debian's python3-torch: apt-get install -y python3-torch)" >&2
  : > "$tmp/torch.jsonl"
fi

if [[ -n "$keep" ]]; then
  mkdir -p "$keep"
  cp "$tmp/cpp.jsonl" "$tmp/torch.jsonl" "$keep/"
fi

python3 - "$tmp/cpp.jsonl" "$tmp/torch.jsonl" <<'EOF'
import json, sys

cpp = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
torch = {}
for l in open(sys.argv[2]):
    if l.strip():
        r = json.loads(l)
        if "op" in r:
            torch[(r["op"], r["n"], r["threads"])] = r

# Which torch op does the same work as each codec (None: no equivalent).
def torch_op(codec):
    base = codec.split(":")[0]
    return {"fp16": "fp16", "bf16": "bf16", "int8": "int8", "topk": "topk",
            "none": "memcpy"}.get(base)

def f(v, fmt="{:.2f}"):
    return "—" if v is None else fmt.format(v)

for n in sorted({r["n"] for r in cpp}):
    rows = [r for r in cpp if r["n"] == n]
    isa = rows[0].get("isa")
    print(f"\n### n = {n:,} fp32 ({n * 4 / 1e6:.0f} MB)" + (f", {isa} loops" if isa else "") + "\n")
    print("| codec | threads | encode GB/s | decode GB/s | % of memcpy (enc / dec) "
          "| memcpy GB/s (C++ / torch) | torch equivalent GB/s (enc / dec) "
          "| speedup vs torch (enc / dec) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        t = r["threads"]
        op = torch_op(r["codec"])
        tr = torch.get((op, n, t)) if op else None
        tm = torch.get(("memcpy", n, t))
        if op == "memcpy" and tr is not None:
            t_enc, t_dec = tr["encode_gbs"], tr["encode_gbs"]
        else:
            t_enc = tr["encode_gbs"] if tr else None
            t_dec = tr["decode_gbs"] if tr else None
        sp_enc = r["encode_gbs"] / t_enc if t_enc else None
        sp_dec = r["decode_gbs"] / t_dec if t_dec else None
        print(f"| {r['codec']} | {t} | {r['encode_gbs']:.2f} | {r['decode_gbs']:.2f} "
              f"| {100 * r['encode_gbs'] / r['memcpy_gbs']:.0f}% / "
              f"{100 * r['decode_gbs'] / r['memcpy_gbs']:.0f}% "
              f"| {r['memcpy_gbs']:.1f} / {f(tm['encode_gbs'] if tm else None, '{:.1f}')} "
              f"| {f(t_enc)} / {f(t_dec)} "
              f"| {f(sp_enc, '{:.2f}x')} / {f(sp_dec, '{:.2f}x')} |")
EOF
