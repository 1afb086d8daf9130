#pragma once
// Whole arrays between fp32 and the 16-bit formats, with the fastest loop this CPU
// has: the fp16 and bf16 codecs' own, so that an arena of 16-bit replicas
// (daemon/arena.h) rounds exactly as those codecs do. dst holds 2 bytes an element
// (16-bit, little-endian) or one float.

#include <cstddef>
#include <span>

namespace gossip::compression {

void fp32_to_fp16(std::span<const float> src, std::byte* dst);
void fp16_to_fp32(const std::byte* src, std::span<float> dst);
void fp32_to_bf16(std::span<const float> src, std::byte* dst);
void bf16_to_fp32(const std::byte* src, std::span<float> dst);

}  // namespace gossip::compression
