#pragma once
// Which instruction set the dense codecs' hot loops run on. The library is built for
// the baseline of its target (x86-64: SSE2) unless GOSSIP_NATIVE is on; loops that
// gain from wider vectors have versions compiled for AVX2 + F16C and, where the
// instruction count still limits them (int8 and sign encode), for AVX-512
// (__attribute__((target))). The best one the CPU and the OS support is chosen at
// run time. Every version writes the same bytes, bit for bit, for every input.

#include <atomic>
#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define GOSSIP_HAVE_X86_KERNELS 1
#define GOSSIP_TARGET_AVX2 __attribute__((target("avx2,f16c")))
#define GOSSIP_TARGET_AVX512 __attribute__((target("avx2,f16c,avx512f,avx512bw,avx512vl,avx512dq")))
#endif

namespace gossip {

// Ordered: each level includes the ones before it. A codec without kernels for a
// level uses those of the highest level below it.
enum class Isa : uint8_t { kPortable, kAvx2, kAvx512 };

// The best the machine supports, detected once. (__builtin_cpu_supports checks that
// the OS saves the YMM and ZMM registers too; F16C, which not every compiler's
// __builtin_cpu_supports knows, is read from CPUID leaf 1.)
inline Isa detected_isa() {
#ifdef GOSSIP_HAVE_X86_KERNELS
  static const Isa isa = [] {
    __builtin_cpu_init();
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
    if (!__builtin_cpu_supports("avx2") || !f16c) return Isa::kPortable;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
      return Isa::kAvx512;
    return Isa::kAvx2;
  }();
  return isa;
#else
  return Isa::kPortable;
#endif
}

namespace isa_detail {
inline std::atomic<Isa>& active() {
  static std::atomic<Isa> isa{detected_isa()};
  return isa;
}
}  // namespace isa_detail

// The one the codecs use now, read once per encode or decode call.
inline Isa active_isa() { return isa_detail::active().load(std::memory_order_relaxed); }

// For tests and benchmarks that compare the paths: selects `isa` (at most
// detected_isa()) for calls that start afterwards, and returns the previous choice.
inline Isa set_active_isa(Isa isa) {
  if (static_cast<uint8_t>(isa) > static_cast<uint8_t>(detected_isa())) isa = detected_isa();
  return isa_detail::active().exchange(isa, std::memory_order_relaxed);
}

inline const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kPortable:
      return "portable";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

}  // namespace gossip
