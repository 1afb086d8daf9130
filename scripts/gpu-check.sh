#!/usr/bin/env bash
# shared/GPU-CHECKLIST.md as one script, for a machine with a GPU: the tests that
# skip without one, the device codecs' and NCCL's benchmarks, an NCCL cluster, the
# PyTorch client with a CUDA model, and bench/torch_vs_ddp.py (plain, DDP, gossipd). Each step is bounded by a timeout and writes
# its log to OUT; a failing step does not stop the next. Exit status: the number of
# failed steps.
#
#   scripts/gpu-check.sh [BUILD_DIR [OUT]]       # defaults: build, ./gpu-check
#   ONLY="codecs_test codec_bench" scripts/gpu-check.sh    # those steps alone
#
# BUILD_DIR is a build with CUDA and NCCL (bin/, lib/). Where it was built on another
# machine (the device tool: `scripts/gpu-check.sh --bundle DIR` here lays out DIR with
# stripped binaries, the shared libraries they need beyond glibc and libstdc++, and
# Fashion-MNIST), the libraries the machine lacks are taken from BUILD_DIR/lib-extra
# and the data from BUILD_DIR/data.
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"

if [[ "${1:-}" == "--bundle" ]]; then
  dir="${2:?--bundle DIR}"
  build="${3:-$root/build}"
  rm -rf "$dir" && mkdir -p "$dir/bin" "$dir/lib" "$dir/lib-extra" "$dir/data"
  for b in gossipd gossipctl gossip-train cuda_codec_bench nccl_bench \
           compression_cuda_codecs_test nccl_all_reduce_test; do
    strip -o "$dir/bin/$b" "$build/bin/$b" || exit 1
  done
  cp -a "$build"/lib/libgossip.so* "$dir/lib/"
  strip "$(readlink -f "$dir/lib/libgossip.so")"
  for f in "$dir"/bin/* "$dir/lib/libgossip.so"; do ldd "$f"; done | awk '$3 ~ /^\// {print $3}' |
    sort -u | grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|librt|libdl|libresolv|libnccl)\.so' |
    while read -r lib; do cp -L "$lib" "$dir/lib-extra/"; done
  cp /usr/share/datasets/fashion-mnist/*.gz "$dir/data/"
  du -sh "$dir"
  exit 0
fi

build="$(cd "${1:-$root/build}" && pwd)"
out="${2:-$root/gpu-check}"
mkdir -p "$out"
failed=0

# Libraries this machine lacks (a bundle built elsewhere), and NCCL where only a
# Python wheel brought it.
if [[ -d "$build/lib-extra" ]]; then
  mkdir -p /tmp/gossip-libs
  for lib in "$build"/lib-extra/*; do
    ldconfig -p | grep -q "[[:space:]]$(basename "$lib")[[:space:]]" || ln -sf "$lib" /tmp/gossip-libs/
  done
  export LD_LIBRARY_PATH="/tmp/gossip-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if ! ldconfig -p | grep -q '[[:space:]]libnccl.so.2[[:space:]]'; then
  nccl="$(find /usr/local /opt /usr/lib -name libnccl.so.2 2>/dev/null | head -1)"
  [[ -n "$nccl" ]] && export LD_LIBRARY_PATH="$(dirname "$nccl"):${LD_LIBRARY_PATH:-}"
fi
if [[ -d "$build/data" && ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]]; then
  mkdir -p /usr/share/datasets/fashion-mnist && cp "$build"/data/*.gz /usr/share/datasets/fashion-mnist/
fi

step() {  # step NAME SECONDS COMMAND...; ONLY="NAME ..." runs those alone
  local name="$1" secs="$2"
  shift 2
  [[ -z "${ONLY:-}" || " $ONLY " == *" $name "* ]] || return 0
  local t0=$SECONDS
  timeout -k 10 "$secs" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  printf '== %-22s rc=%-3d %4d s\n' "$name" "$rc" $((SECONDS - t0))
  tail -n "${TAIL:-25}" "$out/$name.log"
  [[ $rc -eq 0 ]] || failed=$((failed + 1))
}

{
  nvidia-smi -L
  nvidia-smi --query-gpu=driver_version,memory.total --format=csv,noheader
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldd "$build/bin/gossipd" | grep -E 'not found|nccl' || true
} 2>&1

cd "$root"
TAIL=60 step torch_cuda 400 python3 "$root/tests/client/python_torch_cuda_test.py" --build "$build"
# Issue 42's goals: ms per step against plain and DDP in one run (ResNet-18 at batch 128,
# ResNet-50 at 64), and whether the nodes end with one model.
TAIL=14 step torch_vs_ddp_r18 200 python3 "$root/bench/torch_vs_ddp.py" --model resnet18 --batch 128 \
  --steps 40 --warmup 8 --build "$build" --json "$out/torch_vs_ddp_r18.json" --check
TAIL=14 step torch_vs_ddp_r50 200 python3 "$root/bench/torch_vs_ddp.py" --model resnet50 --batch 64 \
  --steps 30 --warmup 6 --build "$build" --json "$out/torch_vs_ddp_r50.json" --check
TAIL=8 step codecs_test 240 "$build/bin/compression_cuda_codecs_test" --gtest_brief=1
TAIL=12 step nccl_test 180 "$build/bin/nccl_all_reduce_test" --gtest_brief=1
TAIL=40 step codec_bench 240 "$build/bin/cuda_codec_bench" --sizes 25000000,250000000 --reps 7
step nccl_bench 120 "$build/bin/nccl_bench" --sizes 1000000,25000000,100000000 --reps 20
step nccl_two_ranks 60 "$build/bin/nccl_bench" --two-ranks-one-gpu
# A cluster of two daemons on one GPU: NCCL refuses it, and the run must fail at
# once saying why (one node alone never calls NCCL: its mean is its own model).
TAIL=4 step cluster_nccl_2 100 "$build/bin/gossipctl" cluster --nodes 2 --strategy allreduce \
  --transport nccl --steps 100 --timeout 80 --round-timeout 20
# The kernels under memcheck, one codec of each kind (the sanitizer is slow).
if command -v compute-sanitizer > /dev/null; then
  TAIL=4 step memcheck 180 compute-sanitizer --error-exitcode 1 "$build/bin/compression_cuda_codecs_test" \
    --gtest_brief=1 --gtest_filter='AllCodecs/CudaCodecs.*/fp16:AllCodecs/CudaCodecs.*/int8_7:AllCodecs/CudaCodecs.*/sign_13:AllCodecs/CudaCodecs.*/topk_0_01:AllCodecs/CudaCodecs.*/qsgd_3_bucket1:AllCodecs/CudaCodecs.*/qsgd_16_bucket512:AllCodecs/CudaCodecs.*/int8_1000:AllCodecs/CudaCodecs.*/sign_33:AllCodecs/CudaCodecs.*/qsgd_5_bucket100'
fi
echo "failed steps: $failed"
exit "$failed"
