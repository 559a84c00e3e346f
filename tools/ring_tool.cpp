// The ring's calls in the tool (ring_tool.hpp).
#include "ring_tool.hpp"

#include <nlohmann/json.hpp>

#include <bit>
#include <cstring>
#include <limits>
#include <random>

#include "registry.hpp"

namespace relpos::tool {

void RingPlan::validate() const {
  if (sharded) shard.validate();
  else ring.validate();
}

std::vector<RingPiece> RingPlan::query_pieces(std::uint32_t rank) const {
  if (sharded) return {{0, shard.attention.queries}};
  return ring.query_pieces(rank);
}

std::vector<RingPiece> RingPlan::key_pieces(std::uint32_t rank) const { return sharded ? shard.key_pieces(rank) : ring.key_pieces(rank); }

RingPlan ring_plan(const AttentionParams& p, std::uint32_t ranks, RingLayout layout) {
  RingPlan plan;
  plan.sharded = p.queries < p.keys;
  plan.ring = {p, ranks, layout};
  plan.shard = {p, ranks, RingGather::Root, 0};
  return plan;
}

RingInputs random_ring_inputs(const AttentionParams& p, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  auto fill = [&](std::uint64_t n, float lo = -1.0f, float hi = 1.0f) {
    std::vector<float> v(n);
    for (float& x : v) x = lo + (hi - lo) * u(rng);
    return v;
  };
  RingInputs in;
  in.q = fill(p.rows() * p.head_dim);
  in.k = fill(std::uint64_t{p.batch} * p.kv_heads * p.keys * p.head_dim);
  in.v = fill(in.k.size());
  const bool positive = p.bias == AttentionBias::Alibi || p.bias == AttentionBias::Kerple;
  in.bias = positive ? fill(p.bias_elements(), 0.05f, 0.5f) : fill(p.bias_elements());
  if (p.bias == AttentionBias::Shaw) {
    in.rel_keys = fill((2ull * p.max_relative_position + 1) * p.head_dim);
    in.rel_values = fill(in.rel_keys.size());
  }
  if (p.dtype == DType::F16)
    for (auto* x : {&in.q, &in.k, &in.v}) *x = from_half(to_half(*x));
  return in;
}

RingInputs rank_inputs(const RingCall& c, std::uint32_t rank) {
  const AttentionParams& p = c.p;
  const auto qp = c.plan.query_pieces(rank), kp = c.plan.key_pieces(rank);
  const std::uint64_t D = p.head_dim, BH = std::uint64_t{p.batch} * p.heads, BHkv = std::uint64_t{p.batch} * p.kv_heads;
  RingInputs in;
  in.q = take_pieces<float>(c.in.q, BH, p.queries, D, qp);
  if (p.cache_format) {  // rows of the format's bytes
    const std::uint64_t row = cache_row_bytes(p.cache(), p.head_dim);
    in.k_bytes = take_pieces<std::uint8_t>(c.in.k_bytes, BHkv, p.keys, row, kp);
    in.v_bytes = take_pieces<std::uint8_t>(c.in.v_bytes, BHkv, p.keys, row, kp);
  } else {
    in.k = take_pieces<float>(c.in.k, BHkv, p.keys, D, kp);
    in.v = take_pieces<float>(c.in.v, BHkv, p.keys, D, kp);
  }
  const std::uint64_t local_bias = c.plan.sharded ? c.plan.shard.local_bias_elements(rank) : c.plan.ring.local_bias_elements(rank);
  if (local_bias == p.bias_elements()) in.bias = c.in.bias;
  else if (c.plan.sharded) in.bias = take_pieces<float>(c.in.bias, std::uint64_t{p.heads} * p.queries, p.keys, 1, kp);  // dense columns
  else in.bias = take_pieces<float>(c.in.bias, p.heads, p.queries, p.keys, qp);  // dense rows
  in.rel_keys = c.in.rel_keys;
  in.rel_values = c.in.rel_values;
  return in;
}

RankResult run_ring_rank(RingRank& rank, const RingPlan& plan, const AttentionParams& p, const RingInputs& in) {
  Context& ctx = rank.context();
  const std::uint32_t r = rank.rank();
  std::uint32_t Qr = 0;
  for (const RingPiece& piece : plan.query_pieces(r)) Qr += piece.count;
  const std::uint64_t rows = std::uint64_t{p.batch} * p.heads * Qr, values = rows * p.head_dim;
  Buffer q = make_float_buffer(ctx, in.q, p.dtype);
  Buffer k = p.cache_format ? make_buffer(ctx, std::span<const std::uint8_t>(in.k_bytes)) : make_float_buffer(ctx, in.k, p.dtype);
  Buffer v = p.cache_format ? make_buffer(ctx, std::span<const std::uint8_t>(in.v_bytes)) : make_float_buffer(ctx, in.v, p.dtype);
  Buffer out, lse, bias, rel_keys, rel_values;
  AttentionBuffers b{&q, &k, &v};
  if (plan.has_output(r)) {
    out = Buffer(ctx, values * dtype_size(p.output_dtype()));
    lse = Buffer(ctx, rows * 4);
    b.out = &out;
    b.lse = &lse;
  }
  if (!in.bias.empty()) b.bias = &(bias = make_buffer(ctx, in.bias));
  if (!in.rel_keys.empty()) {
    b.rel_keys = &(rel_keys = make_buffer(ctx, in.rel_keys));
    b.rel_values = &(rel_values = make_buffer(ctx, in.rel_values));
  }
  RankResult res;
  res.timing = plan.sharded ? sharded_attention(rank, plan.shard, b) : ring_attention(rank, plan.ring, b);
  if (plan.has_output(r)) {
    res.out = download_floats(out, values, p.output_dtype());
    res.lse = lse.download<float>(rows);
  }
  return res;
}

AttentionResult empty_ring_result(const AttentionParams& p) {
  return {std::vector<float>(p.rows() * p.head_dim, 0.0f), std::vector<float>(p.rows(), -std::numeric_limits<float>::infinity())};
}

void put_rank_result(const RingPlan& plan, const AttentionParams& p, std::uint32_t rank, const RankResult& res, AttentionResult& whole) {
  if (!plan.has_output(rank)) return;
  const auto qp = plan.query_pieces(rank);
  const std::uint64_t BH = std::uint64_t{p.batch} * p.heads;
  put_pieces<float>(res.out, whole.out, BH, p.queries, p.head_dim, qp);
  put_pieces<float>(res.lse, whole.lse, BH, p.queries, 1, qp);
}

nlohmann::json ring_timing_json(const RankResult& res, std::uint32_t rank) {
  const RingTiming& t = res.timing;
  nlohmann::json steps = nlohmann::json::array();
  for (const RingStepTiming& s : t.steps)
    steps.push_back({{"compute_ms", s.compute_ms}, {"comm_ms", s.comm_ms}, {"comm_end_ms", s.comm_end_ms}, {"wall_ms", s.wall_ms}});
  return {{"rank", rank},
          {"compute_ms", t.compute_ms()},
          {"comm_ms", t.comm_ms()},
          {"exposed_comm_ms", t.exposed_comm_ms()},
          {"hidden_fraction", t.hidden_fraction()},
          {"setup_ms", t.setup_ms},
          {"total_ms", t.total_ms},
          {"record_ms", t.record_ms},
          {"blocks_computed", t.blocks_computed},
          {"blocks_skipped", t.blocks_skipped},
          {"exchange_bytes", t.exchange_bytes},
          {"exchange_ms", res.exchange_ms},
          {"steps", steps}};
}

// ---- Messages: 64-bit words, float arrays prefixed by their length --------------------------

namespace {

class Writer {
 public:
  void word(std::uint64_t w) { raw(&w, 8); }
  void real(double d) { raw(&d, 8); }
  void floats(const std::vector<float>& v) {
    word(v.size());
    raw(v.data(), v.size() * 4);
  }
  void octets(const std::vector<std::uint8_t>& v) {
    word(v.size());
    raw(v.data(), v.size());
  }
  std::vector<std::byte> bytes;

 private:
  void raw(const void* p, std::size_t n) {
    if (n == 0) return;  // an empty array's data() may be null
    const auto* b = static_cast<const std::byte*>(p);
    bytes.insert(bytes.end(), b, b + n);
  }
};

class Reader {
 public:
  explicit Reader(const std::vector<std::byte>& b) : bytes_(b) {}
  std::uint64_t word() {
    std::uint64_t w;
    raw(&w, 8);
    return w;
  }
  double real() {
    double d;
    raw(&d, 8);
    return d;
  }
  std::vector<float> floats() {
    const std::uint64_t n = word();
    if (n > (bytes_.size() - at_) / 4) throw Error("a ring message ends early: " + std::to_string(n) + " floats announced");
    std::vector<float> v(n);
    raw(v.data(), n * 4);
    return v;
  }
  std::vector<std::uint8_t> octets() {
    const std::uint64_t n = word();
    if (n > bytes_.size() - at_) throw Error("a ring message ends early: " + std::to_string(n) + " bytes announced");
    std::vector<std::uint8_t> v(n);
    raw(v.data(), n);
    return v;
  }

 private:
  void raw(void* p, std::size_t n) {
    if (n == 0) return;  // an empty array's data() may be null
    if (n > bytes_.size() - at_) throw Error("a ring message ends early");
    std::memcpy(p, bytes_.data() + at_, n);
    at_ += n;
  }
  const std::vector<std::byte>& bytes_;
  std::size_t at_ = 0;
};

}  // namespace

std::vector<std::byte> pack_rank_call(const RingCall& c, std::uint32_t rank) {
  const AttentionParams& p = c.p;
  Writer w;
  // The shape, and the bias family's settings that the root read with its inputs (every rank
  // names the family itself: the ranks compare that).
  for (std::uint64_t x : {std::uint64_t{p.batch}, std::uint64_t{p.heads}, std::uint64_t{p.kv_heads}, std::uint64_t{p.queries},
                          std::uint64_t{p.keys}, std::uint64_t{p.head_dim}, std::uint64_t{p.t5.num_buckets}, std::uint64_t{p.t5.max_distance},
                          std::uint64_t{p.t5.bidirectional}, static_cast<std::uint64_t>(p.t5.log), std::uint64_t{std::bit_cast<std::uint32_t>(p.t5.scale)},
                          static_cast<std::uint64_t>(p.kerple_variant), std::uint64_t{p.max_relative_position}, std::uint64_t{p.sandwich_dim},
                          std::uint64_t{p.sandwich_first_frequency}})
    w.word(x);
  w.floats(p.k_scales);  // fp8's, read from files on the root (the format itself is a flag)
  w.floats(p.v_scales);
  const RingInputs in = rank_inputs(c, rank);
  for (const auto* v : {&in.q, &in.k, &in.v, &in.bias, &in.rel_keys, &in.rel_values}) w.floats(*v);
  w.octets(in.k_bytes);
  w.octets(in.v_bytes);
  return std::move(w.bytes);
}

RingCall unpack_rank_call(const std::vector<std::byte>& bytes, const AttentionParams& flags, std::uint32_t ranks, RingLayout layout) {
  Reader r(bytes);
  RingCall c;
  AttentionParams& p = c.p = flags;
  auto dim = [&](const char* what) { return dimension32(what, r.word()); };
  p.batch = dim("batch");
  p.heads = dim("heads");
  p.kv_heads = dim("kv_heads");
  p.queries = dim("queries");
  p.keys = dim("keys");
  p.head_dim = dim("head_dim");
  p.t5.num_buckets = dim("t5 num_buckets");
  p.t5.max_distance = dim("t5 max_distance");
  p.t5.bidirectional = r.word() != 0;
  p.t5.log = static_cast<T5Log>(r.word());
  p.t5.scale = std::bit_cast<float>(static_cast<std::uint32_t>(r.word()));
  p.kerple_variant = static_cast<KerpleVariant>(r.word());
  p.max_relative_position = dim("max_relative_position");
  p.sandwich_dim = dim("sandwich_dim");
  p.sandwich_first_frequency = dim("sandwich_first_frequency");
  p.k_scales = r.floats();
  p.v_scales = r.floats();
  for (auto* v : {&c.in.q, &c.in.k, &c.in.v, &c.in.bias, &c.in.rel_keys, &c.in.rel_values}) *v = r.floats();
  c.in.k_bytes = r.octets();
  c.in.v_bytes = r.octets();
  c.plan = ring_plan(p, ranks, layout);
  return c;
}

std::vector<std::byte> pack_rank_result(const RankResult& res) {
  Writer w;
  w.floats(res.out);
  w.floats(res.lse);
  const RingTiming& t = res.timing;
  w.real(t.setup_ms);
  w.real(t.total_ms);
  w.real(t.record_ms);
  w.word(t.blocks_computed);
  w.word(t.blocks_skipped);
  w.word(t.exchange_bytes);
  w.real(res.exchange_ms);
  w.word(t.steps.size());
  for (const RingStepTiming& s : t.steps) {
    w.real(s.compute_ms);
    w.real(s.comm_ms);
    w.real(s.wall_ms);
    w.real(s.comm_end_ms);
  }
  return std::move(w.bytes);
}

RankResult unpack_rank_result(const std::vector<std::byte>& bytes) {
  Reader r(bytes);
  RankResult res;
  res.out = r.floats();
  res.lse = r.floats();
  RingTiming& t = res.timing;
  t.setup_ms = r.real();
  t.total_ms = r.real();
  t.record_ms = r.real();
  t.blocks_computed = static_cast<std::uint32_t>(r.word());
  t.blocks_skipped = static_cast<std::uint32_t>(r.word());
  t.exchange_bytes = r.word();
  res.exchange_ms = r.real();
  const std::uint64_t steps = r.word();
  if (steps > RingParams::kMaxRanks) throw Error("a ring message announces " + std::to_string(steps) + " steps");
  for (std::uint64_t s = 0; s < steps; ++s) {
    RingStepTiming st;
    st.compute_ms = r.real();
    st.comm_ms = r.real();
    st.wall_ms = r.real();
    st.comm_end_ms = r.real();
    t.steps.push_back(st);
  }
  return res;
}

}  // namespace relpos::tool
