// A ring rank's kept buffers, the ranks' agreement on a call, the ring all-gather, and timings.
#include "ring/rank.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include "params/checks.hpp"
#include "relpos/context.hpp"
#include "vk/access.hpp"
#include "vk/dispatch.hpp"

namespace relpos {

RingRank::State::State(Context& c, RingTransport& t) : ctx(&c), transport(&t), recorder(c), setup(c) {
  detail::retain_spare_scratch(recorder);  // a causal ring's steps take turns with different block shapes
}

Buffer& RingRank::State::keep(const std::string& name, std::uint64_t bytes, MemoryUse use) {
  bytes = std::max<std::uint64_t>(bytes, 16);
  auto it = kept.find(name);
  if (it != kept.end() && it->second.buffer.size() >= bytes && it->second.use == use) return it->second.buffer;
  if (it != kept.end()) kept.erase(it);  // a call in flight never holds it: calls end waited for
  return kept.emplace(name, Kept{Buffer(*ctx, bytes, use), use}).first->second.buffer;
}

const Buffer& RingRank::State::view(const Buffer& b, std::uint64_t offset, std::uint64_t bytes) {
  constexpr VkBufferUsageFlags usage =
      VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  views.push_back(Buffer::external(*ctx, b.handle(), bytes, usage, b.offset() + offset));
  return views.back();
}

namespace detail {

void ring_require_transport(const RingTransport& t, std::uint32_t ranks) {
  require(ranks == t.ranks(), "ranks", std::to_string(ranks), "must be the transport's ranks = " + std::to_string(t.ranks()));
}

void ring_require_size(const Buffer* b, std::uint64_t bytes, const std::string& name, const std::string& layout) {
  require(b != nullptr, name, "null", "is required (" + layout + ")");
  require(b->size() == bytes, name, std::to_string(b->size()) + " bytes", "must be " + layout + " = " + std::to_string(bytes) + " bytes");
}

void copy_in_groups(Recorder& r, const Buffer& src, const Buffer& dst, const std::vector<VkBufferCopy>& regions) {
  constexpr std::size_t kGroup = 32;
  for (std::size_t first = 0; first < regions.size(); first += kGroup)
    copy_regions(r, src, dst, {regions.begin() + first, regions.begin() + std::min(regions.size(), first + kGroup)});
}

RingFields ring_fields(const AttentionParams& a) {
  using Kind = RingField::Kind;
  // Compared bit for bit (a float's bits), shown as the float.
  auto bits = [](float f) { return static_cast<std::int64_t>(std::bit_cast<std::uint32_t>(f)); };
  return {{"batch", a.batch},
          {"heads", a.heads},
          {"kv_heads", a.kv_heads},
          {"queries", a.queries},
          {"total_queries", a.total_queries},
          {"keys", a.keys},
          {"head_dim", a.head_dim},
          {"dtype", static_cast<std::int64_t>(a.dtype), Kind::DType},
          {"out_dtype", static_cast<std::int64_t>(a.output_dtype()), Kind::DType},
          {"scale", bits(a.effective_scale()), Kind::Float},
          {"causal", a.causal},
          {"bias", static_cast<std::int64_t>(a.bias), Kind::Bias},
          {"t5.num_buckets", a.t5.num_buckets},
          {"t5.max_distance", a.t5.max_distance},
          {"t5.bidirectional", a.t5.bidirectional},
          {"t5.log", static_cast<std::int64_t>(a.t5.log)},
          {"t5.scale", bits(a.t5.scale), Kind::Float},
          {"max_relative_position", a.max_relative_position},
          {"kerple_variant", static_cast<std::int64_t>(a.kerple_variant)},
          {"sandwich_dim", a.sandwich_dim},
          {"sandwich_first_frequency", a.sandwich_first_frequency}};
}

void ring_allgather(RingRank::State& s, Buffer& slots, std::uint64_t slot_bytes, const std::string& what) {
  RingTransport& t = *s.transport;
  const std::uint32_t R = t.ranks(), r = t.rank();
  for (std::uint32_t pass = 0; pass + 1 < R; ++pass) {
    const std::uint32_t send = (r + R - pass) % R, recv = (r + 2 * R - pass - 1) % R;
    t.post(slots, send * slot_bytes, slot_bytes, slots, recv * slot_bytes, slot_bytes, what + " (pass " + std::to_string(pass) + ")");
    t.wait();
  }
}

namespace {
std::string field_text(const RingField& f, std::int64_t value) {
  try {
    switch (f.kind) {
      case RingField::Kind::Float: return number_text(std::bit_cast<float>(static_cast<std::uint32_t>(value)));
      case RingField::Kind::DType: return std::string(dtype_name(static_cast<DType>(value)));
      case RingField::Kind::Bias: return std::string(attention_bias_info(static_cast<AttentionBias>(value)).name);
      case RingField::Kind::Layout:
        if (value == 0 || value == 1) return std::string(ring_layout_name(static_cast<RingLayout>(value)));
        break;
      case RingField::Kind::Gather:
        if (value == 0 || value == 1) return static_cast<RingGather>(value) == RingGather::Root ? "root" : "all";
        break;
      case RingField::Kind::Integer: break;
    }
  } catch (const InvalidArgument&) {  // a value no name belongs to (its rank refuses it too): its number
  }
  return std::to_string(value);
}
}  // namespace

void ring_admit(RingRank::State& s, const RingFields& mine, const std::string& refusal, const std::string& what) {
  RingTransport& t = *s.transport;
  const std::uint32_t R = t.ranks(), r = t.rank();
  auto refuse = [&](const auto& error) {
    s.refused = true;
    throw error;
  };
  if (R == 1) {
    if (!refusal.empty()) refuse(InvalidArgument(refusal));
    return;
  }
  // A rank's slot, of one size for every call so that ranks making different calls compare rather
  // than fail the exchange: which call (a hash of its name), whether it refused, its field count,
  // its fields.
  constexpr std::size_t kHeader = 3, kMaxFields = 61;
  require(mine.size() <= kMaxFields, "settings", std::to_string(mine.size()), "must be <= " + std::to_string(kMaxFields) + " (ring_admit's slot)");
  const std::size_t n = kHeader + kMaxFields;
  auto call_of = [](const std::string& name) {  // FNV-1a: the same in every process
    std::uint64_t h = 14695981039346656037ull;
    for (const char c : name) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    return static_cast<std::int64_t>(h >> 1);
  };
  Buffer& slots = s.keep("admit", n * 8 * R, MemoryUse::Host);
  auto* words = static_cast<std::int64_t*>(slots.host_pointer());
  std::int64_t* own = words + r * n;
  std::fill(own, own + n, 0);
  own[0] = call_of(what);
  own[1] = refusal.empty() ? 0 : 1;
  own[2] = static_cast<std::int64_t>(mine.size());
  for (std::size_t i = 0; i < mine.size(); ++i) own[kHeader + i] = mine[i].value;
  ring_allgather(s, slots, n * 8, what + ": the ranks' agreement on the call");
  for (std::uint32_t k = 0; k < R; ++k)
    if (words[k * n] != own[0] || words[k * n + 2] != own[2])
      refuse(InvalidArgument("call = " + what + " on rank " + std::to_string(r) + ": the ranks disagree: rank " + std::to_string(k) +
                             " makes another call (every rank must make the same ring call)"));
  for (std::uint32_t k = 0; k < R; ++k) {
    const std::int64_t* theirs = words + k * n + kHeader;
    for (std::size_t i = 0; i < mine.size(); ++i)
      if (theirs[i] != mine[i].value)
        refuse(InvalidArgument(mine[i].name + " = " + field_text(mine[i], mine[i].value) + " on rank " + std::to_string(r) +
                               ": the ranks disagree: rank " + std::to_string(k) + " has " + mine[i].name + " = " +
                               field_text(mine[i], theirs[i]) + " (" + what + ")"));
  }
  std::uint32_t first_refusal = R;
  for (std::uint32_t k = 0; k < R && first_refusal == R; ++k)
    if (words[k * n + 1]) first_refusal = k;
  if (first_refusal == R) return;
  // Every rank saw the same refusals: all of them take the refusing ranks' reasons (a second
  // exchange, of text cut to a slot), and throw at the same point.
  constexpr std::uint64_t kText = 1024;
  Buffer& texts = s.keep("admit_text", kText * R, MemoryUse::Host);
  char* text = static_cast<char*>(texts.host_pointer());
  const std::size_t length = std::min<std::size_t>(refusal.size(), kText - 1);
  std::memcpy(text + r * kText, refusal.data(), length);
  text[r * kText + length] = '\0';
  ring_allgather(s, texts, kText, what + ": the reasons of a refused call");
  if (!refusal.empty()) refuse(InvalidArgument(refusal));
  refuse(RingRefused("rank " + std::to_string(r) + ": rank " + std::to_string(first_refusal) + " refused the call (" + what +
                   "): " + std::string(text + first_refusal * kText) + "; no data moved, the ring runs on"));
}

}  // namespace detail

RingRank::RingRank(Context& ctx, RingTransport& transport) : state_(std::make_unique<State>(ctx, transport)) {}
RingRank::~RingRank() = default;
RingRank::RingRank(RingRank&&) noexcept = default;
RingRank& RingRank::operator=(RingRank&&) noexcept = default;
RingRank::State& RingRank::state() const { return detail::live_state(state_, "RingRank"); }
Context& RingRank::context() const { return *state().ctx; }
RingTransport& RingRank::transport() const { return *state().transport; }
std::uint32_t RingRank::rank() const { return state().transport->rank(); }
std::uint32_t RingRank::ranks() const { return state().transport->ranks(); }
bool RingRank::stopped() const { return !state().stopped.empty(); }

double ring_exchange_ms(RingRank& rank, std::uint64_t bytes, std::uint32_t repeat) {
  RingRank::State& s = rank.state();
  return detail::ring_call(
      s, {{"bytes", static_cast<std::int64_t>(bytes)}, {"repeat", repeat}}, "ring_exchange_ms",
      [&] {
        detail::require(repeat >= 1 && repeat <= 1000, "repeat", std::to_string(repeat), "must be in [1, 1000]");
        // Refused here, with the call, rather than by the staging buffers' allocation after the
        // ranks have agreed on it: that refusal names no parameter and stops the ring.
        const std::uint64_t allocation = s.ctx->limits().max_memory_allocation_size;
        const std::uint64_t most = detail::max_buffer_bytes(s.ctx->limits());
        detail::require(bytes <= most, "bytes", std::to_string(bytes),
                        "must be <= " + std::to_string(most) +
                            (allocation ? " (the device's maxMemoryAllocationSize: each rank stages the exchange in host buffers of `bytes`)"
                                        : " (the largest buffer: each rank stages the exchange in host buffers of `bytes`)"));
      },
      [&](RingTransport&) {
    Buffer& a = s.keep("staging0", bytes, MemoryUse::Host);
    Buffer& b = s.keep("staging1", bytes, MemoryUse::Host);
    std::vector<double> ms;
    for (std::uint32_t k = 0; k < repeat; ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      s.transport->post(k % 2 ? b : a, 0, bytes, k % 2 ? a : b, 0, bytes, "exchange " + std::to_string(k));
      s.transport->wait();
      ms.push_back(detail::ms_since(t0));
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  });
}

double RingStepTiming::exposed_comm_ms() const { return std::min(comm_ms, std::max(0.0, comm_end_ms - compute_ms)); }

double RingTiming::compute_ms() const {
  double t = 0;
  for (const auto& s : steps) t += s.compute_ms;
  return t;
}

double RingTiming::comm_ms() const {
  double t = 0;
  for (const auto& s : steps) t += s.comm_ms;
  return t;
}

double RingTiming::exposed_comm_ms() const {
  double t = 0;
  for (const auto& s : steps) t += s.exposed_comm_ms();
  return t;
}

double RingTiming::hidden_fraction() const {
  const double comm = comm_ms();
  return comm > 0 ? 1.0 - exposed_comm_ms() / comm : 1.0;
}

}  // namespace relpos
