// T5 on the GPU, on the per-distance bias kit: t5_distance_row.comp computes the row of each head
// (buckets from host-computed integer thresholds, then the table gather); the kit expands it;
// BiasPlan's steps and fused attention (the family's registry entry, below) record the same rows.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "bias/bias_family.hpp"
#include "ops/bias_plan_state.hpp"
#include "ops/distance_bias.hpp"
#include "params/checks.hpp"
#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "relpos/t5.hpp"
#include "relpos_push/attention.h"
#include "relpos_push/t5.h"
#include "vk/dispatch.hpp"

namespace relpos {
namespace detail {
namespace {

// The window of a T5 bias: no mask of its own (a decoder's buckets are one-sided instead).
DistanceWindow window_of(const T5Params& p) { return {p.heads, p.queries, p.keys, p.query_offset, p.batch, false}; }


// The thresholds of the windows of one bucket configuration (an envelope) whose queries, keys and
// offset vary: the first window bisects the bucket formula like any single call; from the second
// on (a plan's steps), with few buckets, every level threshold is kept (a few KiB) and each
// window's thresholds are a search in them; with more, each window bisects (work that grows with
// the window, never with num_buckets).
class T5Windows {
 public:
  explicit T5Windows(const T5Params& envelope) : envelope_(envelope) {}
  T5WindowThresholds of(const T5Params& p) {
    if (!cached_ && ++windows_ > 1 && envelope_.num_buckets <= kCachedBuckets) {
      levels_ = t5_bucket_thresholds(envelope_);
      cached_ = true;
    }
    return cached_ ? t5_window_thresholds(p, levels_) : t5_window_thresholds(p);
  }

 private:
  static constexpr std::uint32_t kCachedBuckets = 4096;
  T5Params envelope_;
  std::vector<std::uint32_t> levels_;  // t5_bucket_thresholds(envelope), once cached
  bool cached_ = false;
  std::uint32_t windows_ = 0;
};

// The row's dispatches (on the kit's skeleton), from thresholds already in `thr`, into `row`:
// scale * table[bucket, h] for every head, or (no table) the int buckets, one row.
void record_t5_row(Recorder& r, const T5Params& p, const T5WindowThresholds& window, const Buffer* table, const Buffer& thr,
                   const Buffer& row, DescriptorSource* sets) {
  push::T5RowPush pc{};
  pc.heads = p.heads;
  pc.bidirectional = p.bidirectional ? 1 : 0;
  pc.half_buckets = p.bidirectional ? p.num_buckets / 2 : 0;
  pc.max_exact = p.max_exact();
  pc.threshold_count = static_cast<std::uint32_t>(window.thresholds.size());
  pc.threshold_base = window.base;
  pc.scale = p.scale;
  pc.write_buckets = table ? 0 : 1;
  // Buckets need no table: the thresholds stand in for it.
  const BufferSpan thresholds_span{&thr};
  record_distance_rows_into(r, window_of(p), ShaderId::t5_distance_row, pc, {table ? table : &thr}, &thresholds_span,
                            table ? p.heads : 1, row, sets);
}

class T5Rows final : public DistanceRows {
 public:
  T5Rows(Context& ctx, const T5Params& envelope, OpStorage& storage)
      // t5_window_thresholds lists at most one threshold per bucket level.
      : config_(envelope),
        thresholds_(storage.make(std::uint64_t{std::max<std::uint32_t>(envelope.num_buckets, 1)} * 4, "T5 thresholds")),
        windows_(envelope) {
    prepare_row_pipeline(ctx, ShaderId::t5_distance_row);
  }
  void record(Recorder& r, const DistanceWindow& w, const Buffer& table, const Buffer& rows, DescriptorSource* sets) override {
    T5Params p = config_;
    p.heads = w.heads;
    p.queries = w.queries;
    p.keys = w.keys;
    p.query_offset = w.query_offset;
    p.batch = 1;
    const T5WindowThresholds window = windows_.of(p);
    update_words(r, thresholds_, 0, window.thresholds);
    barrier(r);
    record_t5_row(r, p, window, &table, thresholds_, rows, sets);
  }
  ShaderId shader() const override { return ShaderId::t5_distance_row; }

 private:
  T5Params config_;
  const Buffer& thresholds_;
  T5Windows windows_;
};

std::unique_ptr<DistanceRows> t5_rows(Context& ctx, const T5Params& envelope, OpStorage& storage) {
  return std::make_unique<T5Rows>(ctx, envelope, storage);
}

const Buffer& t5_bucket_row(Recorder& r, const T5Params& p) {
  const T5WindowThresholds window = t5_window_thresholds(p);
  const std::vector<std::uint32_t>& thresholds = window.thresholds;
  Buffer& thr = scratch(r, std::max<std::size_t>(thresholds.size(), 1) * 4, MemoryUse::Host);
  if (!thresholds.empty())  // no GPU work uses it yet (fresh, or its last submission has finished)
    std::memcpy(thr.host_pointer(), thresholds.data(), thresholds.size() * 4);
  Buffer& row = scratch(r, window_of(p).row_len() * 4, MemoryUse::Device);
  record_t5_row(r, p, window, nullptr, thr, row, nullptr);
  return row;
}

void require_t5_table_binding(const DeviceLimits& lim, const T5Params& p) {
  const std::uint64_t entries = std::uint64_t{p.num_buckets} * p.heads;
  require_binding(lim, entries, "num_buckets * heads", "the T5 table");
}

}  // namespace

// Fused attention's bias input is the table; the rows are computed from it before the kernels.
extern const BiasFamily kT5Bias{
    .info = {.bias = AttentionBias::T5, .name = "t5", .input = "float32 [num_buckets, heads]"},
    .kernel_mode = RELPOS_ATTN_ROW,
    .input_shape = [](const AttentionParams& p) { return std::vector<std::uint64_t>{p.t5.num_buckets, p.heads}; },
    .validate = [](const AttentionParams& p) { p.t5_row_params().validate(); },
    .check_device = [](const DeviceLimits& lim, const AttentionParams& p) { require_t5_table_binding(lim, p.t5_row_params()); },
    .bias_at = [](const AttentionParams& p, std::span<const float> in, std::uint32_t h, std::uint32_t, std::uint32_t, std::int64_t rp) {
      return p.t5.scale * in[static_cast<std::size_t>(t5_bucket(rp, p.t5)) * p.heads + h];
    },
    .rows = [](Context& ctx, const AttentionParams& envelope, OpStorage& storage) { return t5_rows(ctx, envelope.t5_row_params(), storage); },
    .add_to_logits =
        [](Recorder& r, const AttentionParams& p, const Buffer& table, const Buffer& logits) {
          T5Params t5 = p.t5_row_params();
          t5.batch = p.batch;
          t5_bias_add(r, t5, table, logits, DType::F32);
        },
};


}  // namespace detail

namespace {

void check_table_buffer(const Recorder& r, const T5Params& p, const Buffer& table) {
  const std::uint64_t need = std::uint64_t{p.num_buckets} * p.heads * 4;
  detail::require(table.size() == need, "table buffer", std::to_string(table.size()) + " bytes",
                  "must be float32 [num_buckets, heads] = " + std::to_string(need) + " bytes");
  detail::require_t5_table_binding(r.context().limits(), p);
}

detail::RowsRecorder table_rows(Recorder& r, const T5Params& p, const Buffer& table) {
  return detail::source_rows(detail::window_of(p), [&](detail::OpStorage& s) {
    return detail::DistanceSource{detail::t5_rows(r.context(), p, s), &table, "table buffer"};
  });
}

}  // namespace

void t5_buckets(Recorder& r, const T5Params& p, const Buffer& out) {
  p.validate();
  detail::DistanceWindow w = detail::window_of(p);
  w.heads = 1;
  detail::expand_distance_bias(r, w, out, detail::ExpandMode::Copy32, [&p](Recorder& rec) -> const Buffer& { return detail::t5_bucket_row(rec, p); });
}

void t5_bias(Recorder& r, const T5Params& p, const Buffer& table, const Buffer& out, DType out_dtype) {
  p.validate();
  check_table_buffer(r, p, table);
  detail::distance_bias(r, detail::window_of(p), out, out_dtype, table_rows(r, p, table), {&table, "table buffer"});
}

void t5_bias_add(Recorder& r, const T5Params& p, const Buffer& table, const Buffer& logits, DType logits_dtype) {
  p.validate();
  check_table_buffer(r, p, table);
  detail::distance_bias_add(r, detail::window_of(p), logits, logits_dtype, table_rows(r, p, table), {&table, "table buffer"});
}

BiasPlan::BiasPlan(Context& ctx, const T5Params& envelope, const Buffer& table, DType dtype, bool add) {
  envelope.validate();
  const std::uint64_t need = std::uint64_t{envelope.num_buckets} * envelope.heads * 4;
  detail::require(table.size() == need, "table buffer", std::to_string(table.size()) + " bytes",
                  "must be float32 [num_buckets, heads] = " + std::to_string(need) + " bytes");
  detail::require_t5_table_binding(ctx.limits(), envelope);
  state_ = std::make_unique<State>(ctx, detail::window_of(envelope), dtype, add, [&](detail::OpStorage& s) {
    return detail::DistanceSource{detail::t5_rows(ctx, envelope, s), &table, "table buffer"};
  });
}

}  // namespace relpos
