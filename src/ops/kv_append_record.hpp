#pragma once
// kv_append's recording, shared by kv_append() and KvAppendPlan (as attention_record.hpp is by
// attention() and AttentionPlan).
#include <cstdint>
#include <vector>

#include "relpos/context.hpp"
#include "relpos/kv_cache.hpp"

namespace relpos::detail {

class DescriptorSource;

// The float32 table the shader reads: RoPE's inverse frequencies (at least one value), then the
// fp8 scales' inverses (kv_heads for k, then kv_heads for v). scales_at: where they start.
struct KvAppendConstants {
  std::vector<float> values;
  std::uint32_t scales_at = 0;
  float attention_factor = 1.0f;
};
KvAppendConstants kv_append_constants(const KvAppendParams& p);

// What the op binds besides the caller's buffers: the constants (kv_append_constants' values), a
// stand-in for q (writable, never touched) and descriptor sets (null: the recording's).
// prepare_only: create the pipelines and record nothing (the buffers are not looked at).
struct KvAppendResources {
  const Buffer* constants = nullptr;
  const Buffer* no_q = nullptr;
  DescriptorSource* sets = nullptr;
  bool prepare_only = false;
};

// Checks the buffers (InvalidArgument), then records the append (and the lengths' advance).
void check_kv_append_buffers(Recorder& r, const KvAppendParams& p, const KvAppendBuffers& b);
void record_kv_append(Recorder& r, const KvAppendParams& p, const KvAppendConstants& c, const KvAppendBuffers& b,
                      const KvAppendResources& res);

}  // namespace relpos::detail
