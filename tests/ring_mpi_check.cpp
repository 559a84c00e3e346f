// Ring and sharded attention across MPI ranks (run under mpirun; ctest's ring_mpi_* tests): every
// rank draws the same whole inputs, runs its part over the MPI transport, and compares its own
// pieces with attention() of the whole sequence on its own device (and the reference). Every bias
// mode, both layouts, f32 and f16, causal or not, uneven chunks. Exit status 0 when every case on
// this rank passed with no validation message.
//
// --fault KIND:RANK:STEP breaks rank RANK at ring step STEP of the first case: `throw` (a transport
// error, reported to the others), `hang` (the rank stops answering: the others time out) or `exit`
// (the process ends at once). --slow RANK:STEP:MS makes rank RANK spend MS ms (as in a long compute)
// before it posts ring step STEP of the first case: the others, having failed, wait for it to hear
// and print before the job ends. --timeout-ms sets the transport's timeout. --refuse RANK: first a call
// whose q buffer on rank RANK is too small, refused there (InvalidArgument) and on every other rank
// (RingError naming it) before any data moves; the cases then run on the same ring. --second-ring 1:
// only an MpiRing made and destroyed, then a second one, which must be refused saying that MPI was
// finalised (MPI_Init cannot follow MPI_Finalize).
#include <relpos/relpos.hpp>
#include <relpos/ring.hpp>
#include <relpos/ring_mpi.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <thread>

#include "support/gpu_fixture.hpp"
#include "support/ring_data.hpp"

using namespace relpos;

namespace {

constexpr double kTolF32 = 1e-4;  // as test_ring_attention.cpp
constexpr double kTolF16 = 1e-3;

struct Fault {
  std::string kind;
  std::uint32_t rank = 0;
  std::string at;
  std::uint32_t slow_rank = 0;
  std::string slow_at;  // empty: no rank is slow
  std::chrono::milliseconds slow_for{0};
};

class FaultyTransport final : public RingTransport {
 public:
  FaultyTransport(RingTransport& inner, const Fault& f) : inner_(inner), fault_(f) {}
  std::uint32_t rank() const override { return inner_.rank(); }
  std::uint32_t ranks() const override { return inner_.ranks(); }
  std::chrono::milliseconds timeout() const override { return inner_.timeout(); }
  void post(const Buffer& send, std::uint64_t so, std::uint64_t sb, Buffer& recv, std::uint64_t ro, std::uint64_t rb, std::string_view what) override {
    if (!fault_.slow_at.empty() && rank() == fault_.slow_rank && what == fault_.slow_at) std::this_thread::sleep_for(fault_.slow_for);
    if (!fault_.kind.empty() && rank() == fault_.rank && what == fault_.at) {
      if (fault_.kind == "throw") throw RingError("injected transport error");
      if (fault_.kind == "exit") std::_Exit(3);
      if (fault_.kind == "hang")
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    inner_.post(send, so, sb, recv, ro, rb, what);
  }
  void wait() override { inner_.wait(); }
  void fail(const std::string& why) noexcept override { inner_.fail(why); }

 private:
  RingTransport& inner_;
  Fault fault_;
};

}  // namespace

int main(int argc, char** argv) {
  Fault fault;
  std::chrono::milliseconds timeout(60000);
  int refuse = -1;
  bool second_ring = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--refuse") refuse = std::stoi(value);
    if (flag == "--second-ring") second_ring = value == "1";
    if (flag == "--timeout-ms") timeout = std::chrono::milliseconds(std::stoll(value));
    if (flag == "--fault") {
      const auto a = value.find(':'), b = value.rfind(':');
      fault.kind = value.substr(0, a);
      fault.rank = static_cast<std::uint32_t>(std::stoul(value.substr(a + 1, b - a - 1)));
      fault.at = "step " + value.substr(b + 1);
    }
    if (flag == "--slow") {
      const auto a = value.find(':'), b = value.rfind(':');
      fault.slow_rank = static_cast<std::uint32_t>(std::stoul(value.substr(0, a)));
      fault.slow_at = "step " + value.substr(a + 1, b - a - 1);
      fault.slow_for = std::chrono::milliseconds(std::stoll(value.substr(b + 1)));
    }
  }
  if (second_ring) {
    { MpiRing first(argc, argv, timeout); }
    try {
      MpiRing second(argc, argv, timeout);
      std::printf("second MpiRing: FAILED: accepted\n");
      return 1;
    } catch (const Error& e) {
      std::printf("second MpiRing: refused: %s\n", e.what());
      return 0;
    }
  }
  MpiRing mpi(argc, argv, timeout);
  const std::uint32_t R = mpi.ranks(), me = mpi.rank();
  int failures = 0;
  try {
    Context ctx(relpos::test::validated_context_options());
    FaultyTransport transport(mpi.transport(), fault);
    RingRank rank(ctx, transport);
    if (refuse >= 0) {
      std::mt19937 draws(7);
      const RingParams rp{relpos::test::random_ring_params(draws, AttentionBias::T5, DType::F32, R), R, RingLayout::Contiguous};
      const relpos::test::WholeInputs in = relpos::test::random_whole_inputs(draws, rp.attention);
      relpos::test::DeviceInputs d = relpos::test::upload(ctx, DType::F32, {1, 2, 3, 4}, {1, 2, 3, 4}, {1, 2, 3, 4}, in.bias, in, 4, 1);
      std::string kind, text;
      try {
        if (me == static_cast<std::uint32_t>(refuse)) {
          ring_attention(rank, rp, d.buffers());
        } else {
          AttentionResult got{std::vector<float>(rp.attention.rows() * rp.attention.head_dim), std::vector<float>(rp.attention.rows())};
          relpos::test::ring_rank(rank, rp, in, got);
        }
      } catch (const InvalidArgument& e) {
        kind = "InvalidArgument";
        text = e.what();
      } catch (const RingError& e) {
        kind = "RingError";
        text = e.what();
      }
      const bool expected = me == static_cast<std::uint32_t>(refuse) ? kind == "InvalidArgument" && text.find("q buffer") != std::string::npos
                                                                       : kind == "RingError" && text.find("refused the call") != std::string::npos;
      std::printf("rank %u: %s refused: %s: %s\n", me, expected ? "ok" : "FAILED", kind.c_str(), text.c_str());
      if (!expected) ++failures;
    }
    constexpr AttentionBias modes[] = {AttentionBias::None, AttentionBias::T5,    AttentionBias::Distance, AttentionBias::Alibi,
                                       AttentionBias::Shaw, AttentionBias::Dense, AttentionBias::Kerple, AttentionBias::Sandwich};
    std::mt19937 rng(99);  // the same draws on every rank
    for (int trial = 0; trial < 16; ++trial) {
      const RingLayout layout = trial % 2 ? RingLayout::Zigzag : RingLayout::Contiguous;
      const DType dtype = trial % 5 == 4 ? DType::F16 : DType::F32;
      const bool sharded = trial % 8 == 6;
      AttentionParams p = relpos::test::random_ring_params(rng, modes[trial % 8], dtype, layout == RingLayout::Zigzag ? 2 * R : R);
      if (sharded) {
        p.queries = 1 + trial % 2;
        p.query_offset = std::int64_t{p.keys} - p.queries;
      }
      const relpos::test::WholeInputs in = relpos::test::random_whole_inputs(rng, p);
      const AttentionResult one = relpos::test::single_device(ctx, p, in);
      AttentionResult got{std::vector<float>(one.out.size(), std::numeric_limits<float>::quiet_NaN()), std::vector<float>(one.lse.size(), 0.0f)};
      std::vector<float> want_out = one.out, want_lse = one.lse;
      if (sharded) {
        const ShardedParams sp{p, R, RingGather::All, 0};
        relpos::test::sharded_rank(rank, sp, in, got);
      } else {
        const RingParams rp{p, R, layout};
        relpos::test::ring_rank(rank, rp, in, got);
        // Only this rank's pieces were filled: compare those.
        const auto pieces = rp.query_pieces(me);
        const std::uint64_t BH = std::uint64_t{p.batch} * p.heads;
        got.out = take_pieces<float>(got.out, BH, p.queries, p.head_dim, pieces);
        got.lse = take_pieces<float>(got.lse, BH, p.queries, 1, pieces);
        want_out = take_pieces<float>(one.out, BH, p.queries, p.head_dim, pieces);
        want_lse = take_pieces<float>(one.lse, BH, p.queries, 1, pieces);
      }
      const double tol = dtype == DType::F16 ? kTolF16 : kTolF32;
      const double e_out = normalised_error(got.out, want_out), e_lse = normalised_error(got.lse, want_lse);
      const auto messages = relpos::test::take_validation_messages();
      const bool ok = e_out <= tol && e_lse <= kTolF32 && messages.empty();
      std::printf("rank %u: %s %s bias %d %s%s B=%u H=%u/%u Q=%u K=%u off=%lld: out %.3g lse %.3g (tol %.0e)%s\n", me, ok ? "ok" : "FAILED",
                  sharded ? "sharded" : std::string(ring_layout_name(layout)).c_str(), static_cast<int>(p.bias), std::string(dtype_name(dtype)).c_str(),
                  p.causal ? " causal" : "", p.batch, p.heads, p.kv_heads, p.queries, p.keys, static_cast<long long>(p.query_offset), e_out, e_lse, tol,
                  messages.empty() ? "" : (" validation: " + messages.front()).c_str());
      if (!ok) ++failures;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ring_mpi_check: rank %u: error: %s\n", me, e.what());
    std::fflush(stderr);
    mpi.transport().fail(e.what());
    mpi.abort(2, mpi.transport().timeout());
  }
  std::fflush(stdout);
  return failures == 0 ? 0 : 1;
}
