// Ring attention on one rank (docs/ring_attention.md). The rank's keys and values travel as one
// "parcel" (each key piece's k then v, at 256-byte aligned offsets), held in two buffers: at step s
// the device computes with one while the host receives the next parcel into the other and sends the
// one in use on. Where the device's memory is host-visible (integrated GPUs, CPU devices) the
// parcels are the staging; otherwise two host-visible staging buffers carry them, and a parcel
// that arrived is copied into device memory at once, while the step that received it computes. Each block's partial result is merged into
// its query piece's running result by log-sum-exp (three float32 slots: the running result, the
// new block, the merged result), the last merge writing the output.
#include <algorithm>
#include <bit>
#include <limits>

#include "ops/attention_launch.hpp"
#include "ops/attention_record.hpp"
#include "params/checks.hpp"
#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "ring/block.hpp"
#include "ring/rank.hpp"
#include "vk/dispatch.hpp"

namespace relpos {
namespace {

using Clock = std::chrono::steady_clock;
using detail::require;
using detail::ring_aligned;

constexpr std::uint32_t kNegInfBits = 0xff800000u;


// The layout of a parcel: per key piece, its k part then its v part.
struct Parcel {
  std::vector<RingPiece> pieces;
  std::vector<std::uint64_t> k_offset, v_offset, part_bytes;
  std::uint64_t bytes = 0;
};

Parcel parcel_of(const RingParams& p, std::uint32_t rank) {
  const AttentionParams& a = p.attention;
  Parcel c;
  c.pieces = p.key_pieces(rank);
  for (const RingPiece& k : c.pieces) {
    const std::uint64_t part = std::uint64_t{a.batch} * a.kv_heads * k.count * a.head_dim * dtype_size(a.dtype);
    c.part_bytes.push_back(part);
    c.k_offset.push_back(c.bytes);
    c.bytes += ring_aligned(part);
    c.v_offset.push_back(c.bytes);
    c.bytes += ring_aligned(part);
  }
  return c;
}

// Regions between a tensor [outer, local, inner] (pieces concatenated along local) and one
// piece's [outer, count, inner] at `piece_offset` in another buffer; `to_piece` picks the direction.
std::vector<VkBufferCopy> piece_regions(std::uint64_t outer, std::uint32_t local, std::uint32_t piece_first_local, std::uint32_t count,
                                        std::uint64_t inner_bytes, std::uint64_t piece_offset, bool to_piece) {
  std::vector<VkBufferCopy> regions;
  for (std::uint64_t o = 0; o < outer; ++o) {
    const std::uint64_t whole = (o * local + piece_first_local) * inner_bytes, piece = piece_offset + o * count * inner_bytes;
    const std::uint64_t bytes = std::uint64_t{count} * inner_bytes;
    if (to_piece) detail::add_region(regions, whole, piece, bytes);
    else detail::add_region(regions, piece, whole, bytes);
  }
  return regions;
}

// One query piece's results: the slots it merges in, and where its final result goes.
struct QueryPiece {
  RingPiece piece;
  std::uint32_t local_first = 0;  // its first row among the rank's local queries
  std::uint64_t rows = 0;         // batch * heads * count
  const Buffer* q = nullptr;
  const Buffer* out = nullptr;  // the final output (output dtype) and lse
  const Buffer* lse = nullptr;
  Buffer* acc = nullptr;        // float32 [3 slots][rows, head_dim], slot stride acc_slot
  // float32 [3 slots][rows] or, where the mode keeps an lse reference, [3 slots][rows, 2] (each
  // row's lse relative to its reference, then the reference), slot stride lse_slot
  Buffer* acc_lse = nullptr;
  std::uint64_t acc_slot = 0, lse_slot = 0;
  std::uint32_t blocks = 0;     // blocks it meets over the whole ring
  std::uint32_t done = 0;
  std::uint32_t running = 0;    // the slot holding the running result: 0 or 2 (slot 1 takes each new block)
};

struct Block {
  std::uint32_t query_piece;  // index into the rank's QueryPieces
  std::uint32_t key_piece;    // index into the step's parcel
};

}  // namespace

RingTiming ring_attention(RingRank& rank, const RingParams& p, const AttentionBuffers& b) {
  RingRank::State& s = rank.state();
  const auto t_call = Clock::now();
  // The ranks agree on the call first: a rank whose settings differ (an MPMD launch's) is named as
  // such, rather than by a buffer those settings size differently.
  detail::RingFields fields = detail::ring_fields(p.attention);
  fields.insert(fields.begin(), {{"ranks", p.ranks},
                                 {"layout", static_cast<std::int64_t>(p.layout), detail::RingField::Kind::Layout},
                                 {"query_offset", p.attention.query_offset}});
  const std::uint32_t r = rank.rank();
  return detail::ring_call(s, fields, "ring attention", [&] {
    p.validate();
    detail::ring_require_transport(*s.transport, p.ranks);
    const AttentionParams& a = p.attention;
    const std::uint64_t B = a.batch, H = a.heads, Hkv = a.kv_heads, D = a.head_dim, es = dtype_size(a.dtype);
    const DType out_dtype = a.output_dtype();
    const std::uint32_t Qr = p.local_queries(r), Kr = p.local_keys(r);
    const std::string dt(dtype_name(a.dtype)), odt(dtype_name(out_dtype));
    detail::require_own_buffers(s.recorder, b);
    detail::ring_require_size(b.q, B * H * Qr * D * es, "q buffer", dt + " [batch, heads, local queries = " + std::to_string(Qr) + ", head_dim]");
    detail::ring_require_size(b.k, B * Hkv * Kr * D * es, "k buffer", dt + " [batch, kv_heads, local keys = " + std::to_string(Kr) + ", head_dim]");
    detail::ring_require_size(b.v, B * Hkv * Kr * D * es, "v buffer", dt + " [batch, kv_heads, local keys = " + std::to_string(Kr) + ", head_dim]");
    detail::ring_require_size(b.out, B * H * Qr * D * dtype_size(out_dtype), "out buffer", odt + " [batch, heads, local queries, head_dim]");
    if (b.lse) detail::ring_require_size(b.lse, B * H * Qr * 4, "lse buffer", "float32 [batch, heads, local queries]");
    detail::check_relative_tables(s.ctx->limits(), a, b);
    if (p.local_bias_elements(r) > 0)
      detail::ring_require_size(b.bias, p.local_bias_elements(r) * 4, "bias buffer",
                                detail::ring_bias_input(a) == detail::RingBiasInput::Dense ? "float32 [heads, local queries, keys]"
                                                                                          : "float32, as attention() takes it");
    require(b.key_lengths == nullptr, "key_lengths buffer", "given", "is not taken by ring attention (no key padding)");
    require(b.block_table == nullptr && b.cache_lengths == nullptr, "block_table buffer", "given", "is not taken by ring attention");
  }, [&](RingTransport& t) {
    const std::uint32_t R = p.ranks;
    const AttentionParams& a = p.attention;
    const std::uint64_t B = a.batch, H = a.heads, Hkv = a.kv_heads, D = a.head_dim, es = dtype_size(a.dtype);
    const DType out_dtype = a.output_dtype();
    const std::uint32_t Qr = p.local_queries(r), Kr = p.local_keys(r);
    const detail::RingBiasInput bias_kind = detail::ring_bias_input(a);
    const std::uint32_t lse_floats = detail::ring_lse_floats(a);

    // --- The rank's pieces, the parcels of every step and the blocks it computes -----------
    const std::vector<RingPiece> my_queries = p.query_pieces(r);
    std::vector<Parcel> parcels(R);
    std::uint64_t parcel_capacity = 0;
    for (std::uint32_t k = 0; k < R; ++k) {
      parcels[k] = parcel_of(p, k);
      parcel_capacity = std::max(parcel_capacity, parcels[k].bytes);
    }
    std::vector<QueryPiece> pieces(my_queries.size());
    std::vector<std::vector<Block>> steps(R);
    RingTiming timing;
    timing.exchange_bytes = R > 1 ? parcel_capacity : 0;
    for (std::uint32_t step = 0; step < R; ++step) {
      const Parcel& parcel = parcels[(r + R - step) % R];
      for (std::uint32_t qi = 0; qi < my_queries.size(); ++qi)
        for (std::uint32_t ki = 0; ki < parcel.pieces.size(); ++ki) {
          if (detail::ring_block_masked(a, my_queries[qi], parcel.pieces[ki])) {
            ++timing.blocks_skipped;
            continue;
          }
          steps[step].push_back({qi, ki});
          ++pieces[qi].blocks;
          ++timing.blocks_computed;
        }
    }

    // --- Buffers ----------------------------------------------------------------------------
    Buffer* parcel_dev[2] = {&s.keep("parcel0", parcel_capacity, MemoryUse::Device), &s.keep("parcel1", parcel_capacity, MemoryUse::Device)};
    const bool zero_copy = parcel_dev[0]->host_pointer() && parcel_dev[1]->host_pointer();
    Buffer* staging[2] = {parcel_dev[0], parcel_dev[1]};
    if (!zero_copy)
      for (int i = 0; i < 2; ++i) staging[i] = &s.keep("staging" + std::to_string(i), parcel_capacity, MemoryUse::Host);
    std::uint32_t local_first = 0;
    for (std::uint32_t qi = 0; qi < pieces.size(); ++qi) {
      QueryPiece& qp = pieces[qi];
      qp.piece = my_queries[qi];
      qp.local_first = local_first;
      local_first += qp.piece.count;
      qp.rows = B * H * qp.piece.count;
      const std::string n = std::to_string(qi);
      if (pieces.size() == 1) {
        qp.q = b.q;
        qp.out = b.out;
        qp.lse = b.lse ? b.lse : &s.view(s.keep("lse" + n, qp.rows * 4, MemoryUse::Device), 0, qp.rows * 4);
      } else {
        qp.q = &s.view(s.keep("q" + n, qp.rows * D * es, MemoryUse::Device), 0, qp.rows * D * es);
        qp.out = &s.view(s.keep("out" + n, qp.rows * D * dtype_size(out_dtype), MemoryUse::Device), 0, qp.rows * D * dtype_size(out_dtype));
        qp.lse = &s.view(s.keep("lse" + n, qp.rows * 4, MemoryUse::Device), 0, qp.rows * 4);
      }
      if (qp.blocks >= 2) {
        qp.acc_slot = ring_aligned(qp.rows * D * 4);
        qp.lse_slot = ring_aligned(qp.rows * 4 * lse_floats);
        qp.acc = &s.keep("acc" + n, 3 * qp.acc_slot, MemoryUse::Device);
        qp.acc_lse = &s.keep("acc_lse" + n, 3 * qp.lse_slot, MemoryUse::Device);
      }
    }
    // Each block of a step cuts its bias out of the rank's input into a window of its own.
    std::vector<Buffer*> windows;
    if (bias_kind != detail::RingBiasInput::Parameters) {
      std::uint64_t most = 0;
      std::size_t per_step = 0;
      for (std::uint32_t step = 0; step < R; ++step) {
        per_step = std::max(per_step, steps[step].size());
        for (const Block& blk : steps[step])
          most = std::max(most, detail::ring_block_params(a, my_queries[blk.query_piece], parcels[(r + R - step) % R].pieces[blk.key_piece], out_dtype)
                                    .bias_elements());
      }
      for (std::size_t j = 0; j < per_step; ++j) windows.push_back(&s.keep("bias" + std::to_string(j), most * 4, MemoryUse::Device));
    }
    Recorder& rec = s.recorder;
    const bool timestamps = s.ctx->limits().timestamps;

    // --- Setup: the query pieces, the first parcel, outputs of pieces that meet no key ------
    {
      Recorder& rec = s.setup;
      const std::uint64_t q_row = D * es, kv_row = D * es;
      const Parcel& mine = parcels[r];
      std::uint32_t k_first = 0;
      std::vector<VkBufferCopy> k_regions, v_regions;
      for (std::size_t ki = 0; ki < mine.pieces.size(); ++ki) {
        for (const VkBufferCopy& c : piece_regions(B * Hkv, Kr, k_first, mine.pieces[ki].count, kv_row, mine.k_offset[ki], true)) k_regions.push_back(c);
        for (const VkBufferCopy& c : piece_regions(B * Hkv, Kr, k_first, mine.pieces[ki].count, kv_row, mine.v_offset[ki], true)) v_regions.push_back(c);
        k_first += mine.pieces[ki].count;
      }
      detail::barrier(rec);
      detail::copy_in_groups(rec, *b.k, *parcel_dev[0], k_regions);
      detail::copy_in_groups(rec, *b.v, *parcel_dev[0], v_regions);
      if (!zero_copy) {
        detail::copy_in_groups(rec, *b.k, *staging[0], k_regions);
        detail::copy_in_groups(rec, *b.v, *staging[0], v_regions);
      }
      for (QueryPiece& qp : pieces) {
        if (pieces.size() > 1)
          detail::copy_in_groups(rec, *b.q, *qp.q, piece_regions(B * H, Qr, qp.local_first, qp.piece.count, q_row, 0, true));
        if (qp.blocks == 0) {  // every key hidden: zeros and -inf, as attention() gives
          detail::fill_words(rec, *qp.out, 0, qp.out->size() / 4 * 4, 0);
          detail::fill_words(rec, *qp.lse, 0, qp.lse->size(), kNegInfBits);
        }
      }
      rec.submit_and_wait();
    }
    timing.setup_ms = detail::ms_since(t_call);

    // --- The steps -------------------------------------------------------------------------
    for (std::uint32_t step = 0; step < R; ++step) {
      const std::uint32_t src = (r + R - step) % R;
      const Parcel& parcel = parcels[src];
      const Buffer& held = *parcel_dev[step % 2];
      const auto t0 = Clock::now();
      detail::barrier(rec);
      std::uint32_t ts0 = 0;
      if (timestamps) ts0 = rec.write_timestamp();
      for (std::size_t j = 0; j < steps[step].size(); ++j) {
        const Block& blk = steps[step][j];
        QueryPiece& qp = pieces[blk.query_piece];
        const RingPiece kp = parcel.pieces[blk.key_piece];
        const bool only = qp.blocks == 1, first = qp.done == 0, last = qp.done + 1 == qp.blocks;
        const AttentionParams bp = detail::ring_block_params(a, qp.piece, kp, only ? out_dtype : DType::F32);
        const std::uint64_t kv_bytes = parcel.part_bytes[blk.key_piece];
        AttentionBuffers ab = b;
        ab.q = qp.q;
        ab.k = &s.view(held, parcel.k_offset[blk.key_piece], kv_bytes);
        ab.v = &s.view(held, parcel.v_offset[blk.key_piece], kv_bytes);
        if (bias_kind != detail::RingBiasInput::Parameters) {
          const std::uint64_t bytes = bp.bias_elements() * 4;
          const detail::RingBiasWindow dense{Qr, a.keys, qp.local_first, kp.first};
          detail::copy_in_groups(rec, *b.bias, *windows[j], detail::ring_bias_regions(a, bias_kind, qp.piece, kp, dense));
          ab.bias = &s.view(*windows[j], 0, bytes);
        }
        const std::uint64_t out_bytes = qp.rows * D * 4, lse_bytes = qp.rows * 4 * lse_floats;
        if (only) {
          ab.out = qp.out;
          ab.lse = qp.lse;
        } else {
          const std::uint32_t slot = first ? 0 : 1;
          ab.out = &s.view(*qp.acc, slot * qp.acc_slot, out_bytes);
          ab.lse = &s.view(*qp.acc_lse, slot * qp.lse_slot, lse_bytes);
        }
        // A block to be merged keeps its rows' lse relative to their references (ALiBi's bias of
        // the nearest key): far from its keys (slope·|rp| ~ 1e6) a block's lse, rounded at that
        // size, would move the merge's weights by as much (attention_merge.comp).
        if (only) attention(rec, bp, ab);
        else detail::record_attention_with_lse_reference(rec, bp, ab);
        if (!only && !first) {
          // Slots `running` (0 or 2) and 1 are adjacent: the merge reads both from the lower one.
          const std::uint32_t low = std::min(qp.running, 1u), next = 2 - qp.running;
          const Buffer& in = s.view(*qp.acc, low * qp.acc_slot, 2 * qp.acc_slot);
          const Buffer& in_lse = s.view(*qp.acc_lse, low * qp.lse_slot, 2 * qp.lse_slot);
          const Buffer& out = last ? *qp.out : s.view(*qp.acc, next * qp.acc_slot, out_bytes);
          const Buffer& lse = last ? *qp.lse : s.view(*qp.acc_lse, next * qp.lse_slot, lse_bytes);
          const auto op = detail::begin_op(rec);
          detail::AttentionMergeLayout parts =
              detail::ring_merge_layout(a, in, in_lse, 2, static_cast<std::uint32_t>(qp.acc_slot / 16), static_cast<std::uint32_t>(qp.lse_slot / 4));
          parts.out_relative = parts.reference && !last;
          detail::record_attention_merge(rec, parts, qp.rows, a.head_dim, out, last ? out_dtype : DType::F32, lse);
          qp.running = next;
        }
        ++qp.done;
      }
      if (step + 1 == R && pieces.size() > 1) {  // the pieces' results into the rank's tensors
        detail::barrier(rec);
        for (const QueryPiece& qp : pieces) {
          detail::copy_in_groups(rec, *qp.out, *b.out,
                                 piece_regions(B * H, Qr, qp.local_first, qp.piece.count, D * dtype_size(out_dtype), 0, false));
          if (b.lse) detail::copy_in_groups(rec, *qp.lse, *b.lse, piece_regions(B * H, Qr, qp.local_first, qp.piece.count, 4, 0, false));
        }
      }
      std::uint32_t ts1 = 0;
      if (timestamps) ts1 = rec.write_timestamp();
      rec.submit();
      timing.record_ms += detail::ms_since(t0);
      RingStepTiming st;
      if (step + 1 < R) {
        // The parcel held now goes on; the previous rank's arrives in the other buffer.
        const std::uint32_t from = (src + R - 1) % R;
        const auto c0 = Clock::now();
        t.post(*staging[step % 2], 0, parcel.bytes, *staging[(step + 1) % 2], 0, parcels[from].bytes, "step " + std::to_string(step));
        t.wait();
        st.comm_ms = detail::ms_since(c0);
        st.comm_end_ms = detail::ms_since(t0);
        if (!zero_copy) {
          // Into device memory while this step computes: no barrier, since the step reads the
          // other parcel and the last reader of this one finished (waited for) before; the next
          // step's first barrier orders it before that step's reads.
          detail::copy_regions(s.setup, *staging[(step + 1) % 2], *parcel_dev[(step + 1) % 2], {{0, 0, parcels[from].bytes}});
          s.setup.submit();
        }
      }
      rec.wait();
      s.setup.wait();
      st.wall_ms = detail::ms_since(t0);
      st.compute_ms = timestamps ? rec.elapsed_ms(ts0, ts1) : st.wall_ms - st.comm_ms;
      timing.steps.push_back(st);
    }
    s.end_call();
    timing.total_ms = detail::ms_since(t_call);
    return timing;
  });
}

}  // namespace relpos
