#pragma once
// Ring attention (docs/ring_attention.md): one sequence's attention across R ranks (GPUs of one
// machine or of several), each holding a chunk of the queries and the matching chunk of the keys
// and values. In R steps every rank meets every key/value chunk, which travel around the ring
// (the transfer of the next chunk overlapping the compute of this one), and merges its partial
// results by log-sum-exp. Every block runs attention() with the query offset of the two chunks'
// true global positions, so any bias that is a function of relative position is exact. Plus
// sequence-parallel decoding: a few queries on every rank against keys sharded across ranks.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "relpos/attention.hpp"
#include "relpos/ring_transport.hpp"

namespace relpos {

class Context;

enum class RingLayout : std::uint32_t {
  // The sequence in R chunks, rank r holding chunk r.
  Contiguous = 0,
  // The sequence in 2R chunks, rank r holding chunks r and 2R - 1 - r (in that order): under a
  // causal mask every rank then computes about the same number of visible blocks.
  Zigzag = 1,
};
std::string_view ring_layout_name(RingLayout layout);
std::optional<RingLayout> ring_layout_from_name(std::string_view name);

// A run of consecutive positions along the query or key axis: [first, first + count).
struct RingPiece {
  std::uint32_t first = 0;
  std::uint32_t count = 0;
  bool operator==(const RingPiece&) const = default;
};

// Ring attention of a whole sequence over `ranks` ranks.
struct RingParams {
  // The attention of the whole sequence as one device would run it (AttentionParams: batch, heads,
  // kv_heads, queries, keys, head_dim, dtype, scale, query_offset, causal, bias and its settings).
  // Not with a paged cache, a memory prefix, key lengths (padding) or key_splits (each block
  // chooses its own).
  AttentionParams attention;
  std::uint32_t ranks = 1;
  RingLayout layout = RingLayout::Contiguous;

  static constexpr std::uint32_t kMaxRanks = 4096;

  // Throws InvalidArgument naming the parameter and the limit: ranks in [1, kMaxRanks]; at least
  // one query and one key in every chunk (queries and keys >= R, or 2R zigzag); the attention's
  // own checks.
  void validate() const;
  // The positions rank `rank` holds, in the order its local tensors hold them. Chunk n of N over
  // L positions is [floor(n·L/N), floor((n+1)·L/N)): lengths not divisible by R give chunks one
  // apart. InvalidArgument: ranks outside [1, kMaxRanks], rank >= ranks (ranks are 0 .. ranks-1).
  std::vector<RingPiece> query_pieces(std::uint32_t rank) const;
  std::vector<RingPiece> key_pieces(std::uint32_t rank) const;
  std::uint32_t local_queries(std::uint32_t rank) const;
  std::uint32_t local_keys(std::uint32_t rank) const;
  // Floats of the rank's bias input: the parameters every rank holds whole (T5 table, ALiBi
  // slopes, KERPLE r1 and r2), the whole per-distance row [heads, queries + keys - 1] (every rank
  // windows it for each block), or a dense bias's rows of the rank's queries, [heads,
  // local_queries, keys].
  std::uint64_t local_bias_elements(std::uint32_t rank) const;
};

// Which ranks get the merged result of sharded_attention.
enum class RingGather : std::uint32_t { Root = 0, All = 1 };

// Sequence-parallel attention (decoding, a prefix): every rank holds all `queries` queries and a
// contiguous slice of every sequence's keys; each computes its partial result with the bias of its
// slice's positions and the partials are merged by log-sum-exp on the root or on every rank.
struct ShardedParams {
  // Contiguous k and v: the attention as one device would run it over all the keys; rank r holds
  // key_pieces(r). With a paged cache (attention.paged): this rank's own cache, whose sequences
  // each hold a slice of the sequence, and attention.query_offset the number of each sequence's
  // keys that lie past this rank's slice (the same for every sequence: slices taken from the ends
  // of the sequences, or one sequence); the bias then comes as parameters (no distance rows or
  // dense bias). Packed queries (attention.total_queries, a paged cache): q and out [total_queries,
  // heads, head_dim] and query_lengths the same on every rank, each sequence's queries its last
  // positions (docs/ring_attention.md).
  AttentionParams attention;
  std::uint32_t ranks = 1;
  RingGather gather = RingGather::Root;
  std::uint32_t root = 0;

  void validate() const;
  // Contiguous: the keys rank `rank` holds (one piece); paged: [0, attention.keys). InvalidArgument
  // as RingParams::key_pieces'.
  std::vector<RingPiece> key_pieces(std::uint32_t rank) const;
  // Contiguous: floats of the rank's bias input: parameters, the whole per-distance row, or a
  // dense bias's columns of the rank's keys [heads, queries, local keys].
  std::uint64_t local_bias_elements(std::uint32_t rank) const;
};

// Where a rank's time went.
struct RingStepTiming {
  double compute_ms = 0;   // the device's time for the step's work (GPU timestamps)
  double comm_ms = 0;      // posting the exchange to its completion (0: the last step sends nothing)
  double wall_ms = 0;      // from submitting the step's work until both it and the exchange ended
  double comm_end_ms = 0;  // when the exchange completed, from the submission
  // Communication not hidden behind the compute: what of it lasted past the step's compute time,
  // min(comm, max(0, comm_end - compute)) (the device's launch latency counts as neither).
  double exposed_comm_ms() const;
};
struct RingTiming {
  std::vector<RingStepTiming> steps;
  double setup_ms = 0;   // host time of the handshake and the first chunk's staging
  double total_ms = 0;   // host time of the whole call
  double record_ms = 0;  // of which the host spent recording and submitting device work
  std::uint32_t blocks_computed = 0;
  std::uint32_t blocks_skipped = 0;   // hidden entirely by the causal mask
  std::uint64_t exchange_bytes = 0;  // the largest chunk's keys and values: the most one step sends (0 with one rank)
  double compute_ms() const;
  double comm_ms() const;
  double exposed_comm_ms() const;
  // The share of the communication that overlapped compute: 1 - exposed / comm (1 with none).
  double hidden_fraction() const;
};

// One rank: its context and transport, and the staging, chunk and accumulator buffers its calls
// keep for the next call of the same shape (a decode loop allocates once). Used by one thread.
// It keeps the addresses of both (unlike a Recorder or a plan): the Context and the transport must
// outlive it, and the Context must not be moved while it lives.
class RingRank {
 public:
  RingRank(Context& ctx, RingTransport& transport);
  ~RingRank();
  RingRank(RingRank&&) noexcept;
  RingRank& operator=(RingRank&&) noexcept;
  RingRank(const RingRank&) = delete;
  RingRank& operator=(const RingRank&) = delete;

  Context& context() const;
  RingTransport& transport() const;
  std::uint32_t rank() const;
  std::uint32_t ranks() const;
  // Whether a failure stopped this rank's ring (every later call throws RingError); a refused call
  // (InvalidArgument, RingRefused) does not.
  bool stopped() const;

  struct State;  // opaque: what the library keeps
  State& state() const;  // InvalidArgument for a moved-from RingRank

 private:
  std::unique_ptr<State> state_;
};

// Ring attention on this rank. Every rank calls it with the same RingParams (the ranks check that
// they agree before any data moves) and its own tensors:
// - q, out [batch, heads, local_queries, head_dim], k, v [batch, kv_heads, local_keys, head_dim]
//   (the pieces concatenated along the sequence in the order query_pieces / key_pieces give),
//   of attention.dtype; lse (optional) float32 [batch, heads, local_queries];
// - bias: local_bias_elements floats; rel_keys and rel_values (Shaw) whole on every rank;
//   no key_lengths or paged cache.
// Records, submits and waits itself (R steps). The result equals attention() of the whole
// sequence on one device, out and lse. Bad input is refused before any data moves, on every rank
// and whatever the timing: settings the ranks disagree on, InvalidArgument on every rank; a rank's
// own bad parameters or buffers, InvalidArgument there and a RingRefused (a RingError) naming it on
// every other.
// The ring then runs on. Failures after that (the transport, the device): RingError on every rank,
// and the ring stops for good: every later call on its RingRanks throws RingError (make a new
// transport and RingRank on every rank).
RingTiming ring_attention(RingRank& rank, const RingParams& p, const AttentionBuffers& local);

// Sequence-parallel attention on this rank: q [batch, heads, queries, head_dim] or packed
// [total_queries, heads, head_dim] with query_lengths (the same on every rank), k and v this rank's
// keys (contiguous [batch, kv_heads, local keys, head_dim], or the paged cache with its
// block_table and cache_lengths), bias as local_bias_elements. out and lse (the rows of q) are
// written on the root (RingGather::Root; they may be null elsewhere) or on every rank.
// Records, submits and waits itself (its partials travel through the host). Failures as
// ring_attention's: whatever attention() would refuse of this rank's call is refused before any
// data moves.
RingTiming sharded_attention(RingRank& rank, const ShardedParams& p, const AttentionBuffers& local);

// The median time of one exchange of `bytes` around the ring with nothing else running (every rank
// sends `bytes` to the next and receives as many from the previous, through staging), over
// `repeat` exchanges: the link's share of the cost model (docs/ring_attention.md). Every rank calls
// it with the same arguments. InvalidArgument before any data moves: `bytes` past the device's
// maxMemoryAllocationSize (rounded down to 16 bytes; the staging buffers hold `bytes` each),
// `repeat` outside [1, 1000].
double ring_exchange_ms(RingRank& rank, std::uint64_t bytes, std::uint32_t repeat = 5);

// ---- Host tensors cut into pieces and put back (tools, tests) -----------------------------

// The positions of `pieces` of a tensor [outer, length, inner] held whole: [outer, Σ counts,
// inner], the pieces concatenated along the middle axis.
template <class T>
std::vector<T> take_pieces(std::span<const T> whole, std::uint64_t outer, std::uint32_t length, std::uint64_t inner,
                           std::span<const RingPiece> pieces) {
  std::uint64_t local = 0;
  for (const RingPiece& p : pieces) local += p.count;
  std::vector<T> out(outer * local * inner);
  T* to = out.data();
  for (std::uint64_t o = 0; o < outer; ++o)
    for (const RingPiece& p : pieces) {
      const T* from = whole.data() + (o * length + p.first) * inner;
      std::memcpy(to, from, sizeof(T) * p.count * inner);
      to += p.count * inner;
    }
  return out;
}
// The inverse: writes a rank's [outer, Σ counts, inner] into its positions of `whole`.
template <class T>
void put_pieces(std::span<const T> local, std::span<T> whole, std::uint64_t outer, std::uint32_t length, std::uint64_t inner,
                std::span<const RingPiece> pieces) {
  const T* from = local.data();
  for (std::uint64_t o = 0; o < outer; ++o)
    for (const RingPiece& p : pieces) {
      std::memcpy(whole.data() + (o * length + p.first) * inner, from, sizeof(T) * p.count * inner);
      from += p.count * inner;
    }
}

}  // namespace relpos
