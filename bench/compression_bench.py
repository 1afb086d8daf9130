#!/usr/bin/env python3
"""PyTorch CPU doing the work of the codecs, for bench/compression_bench.sh.

Prints one JSON line per (op, n, threads): median seconds of R timed calls after W
warm-up calls, and GB/s of fp32 input (n * 4 bytes / median), like compression_bench.

  ops (encode / decode):
    memcpy  y.copy_(x)                                     (the anchor)
    fp16    h.copy_(x)   (= x.half() into a pre-touched tensor) / y.copy_(h)
    bf16    b.copy_(x)   (= x.to(torch.bfloat16))              / y.copy_(b)
    int8    the faster of torch.quantize_per_tensor(x, x.abs().max()/127, 0, torch.qint8)
            and (x / scale).round().clamp(-127, 127).to(torch.int8);
            decode: the faster of q.dequantize() and torch.mul(i8, scale, out=y)
    topk    v, i = torch.topk(x.abs(), k); x.gather(0, i)  (k = ceil(0.01 n))
            / y.zero_(); y.scatter_(0, i, v)

Outputs are pre-allocated and pre-touched wherever torch has an out form, as in the
C++ benchmark; the allocating forms (x.half(), x.to(torch.bfloat16)) are timed too
and reported as encode_alloc_s.
"""
import argparse
import json
import math
import statistics
import sys
import time

try:
    import torch
except ImportError as e:  # The shell script reports this and skips the torch columns.
    print(json.dumps({"source": "torch", "error": f"import torch failed: {e}"}))
    sys.exit(2)


def median_s(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    t = []
    for _ in range(reps):
        a = time.perf_counter()
        fn()
        t.append(time.perf_counter() - a)
    return statistics.median(t)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1000000,25000000")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--ratio", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=42)
    a = p.parse_args()

    sizes = [int(s) for s in a.sizes.split(",") if s]
    threads = [int(s) for s in a.threads.split(",") if s]
    for n in sizes:
        g = torch.Generator().manual_seed(a.seed)
        x = torch.randn(n, generator=g, dtype=torch.float32)
        y = torch.zeros(n, dtype=torch.float32)
        h = torch.zeros(n, dtype=torch.float16)
        b = torch.zeros(n, dtype=torch.bfloat16)
        k = min(n, max(1, math.ceil(a.ratio * n)))
        nbytes = n * 4.0
        for t in threads:
            torch.set_num_threads(t)
            common = {"source": "torch", "torch": torch.__version__, "n": n, "threads": t,
                      "torch_threads": torch.get_num_threads(), "reps": a.reps, "warmup": a.warmup}

            def emit(op, enc_s, dec_s, **extra):
                rec = dict(common, op=op, encode_s=enc_s, decode_s=dec_s,
                           encode_gbs=nbytes / enc_s / 1e9,
                           decode_gbs=(nbytes / dec_s / 1e9) if dec_s else None, **extra)
                print(json.dumps(rec), flush=True)

            with torch.no_grad():
                emit("memcpy", median_s(lambda: y.copy_(x), a.warmup, a.reps), None)

                enc = median_s(lambda: h.copy_(x), a.warmup, a.reps)
                dec = median_s(lambda: y.copy_(h), a.warmup, a.reps)
                alloc = median_s(lambda: x.half(), a.warmup, a.reps)
                emit("fp16", enc, dec, encode_alloc_s=alloc)

                enc = median_s(lambda: b.copy_(x), a.warmup, a.reps)
                dec = median_s(lambda: y.copy_(b), a.warmup, a.reps)
                alloc = median_s(lambda: x.to(torch.bfloat16), a.warmup, a.reps)
                emit("bf16", enc, dec, encode_alloc_s=alloc)

                # Two torch forms; the faster one of each direction is the reference.
                def q8():
                    scale = float(x.abs().max()) / 127.0
                    return torch.quantize_per_tensor(x, scale, 0, torch.qint8)
                q = q8()
                enc_q = median_s(q8, a.warmup, a.reps)
                dec_q = median_s(lambda: q.dequantize(), a.warmup, a.reps)

                def q8_manual():
                    scale = x.abs().max() / 127.0
                    return (x / scale).round().clamp(-127, 127).to(torch.int8), scale
                i8, sc = q8_manual()
                enc_m = median_s(q8_manual, a.warmup, a.reps)
                dec_m = median_s(lambda: torch.mul(i8, sc, out=y), a.warmup, a.reps)
                emit("int8", min(enc_q, enc_m), min(dec_q, dec_m),
                     quantize_per_tensor_s=enc_q, dequantize_s=dec_q,
                     manual_encode_s=enc_m, manual_decode_s=dec_m)

                def topk():
                    _, i = torch.topk(x.abs(), k, sorted=False)
                    return x.gather(0, i), i
                vals, idx = topk()

                def scatter():
                    y.zero_()
                    y.scatter_(0, idx, vals)
                enc = median_s(topk, a.warmup, a.reps)
                dec = median_s(scatter, a.warmup, a.reps)
                emit("topk", enc, dec, k=k)


if __name__ == "__main__":
    main()
