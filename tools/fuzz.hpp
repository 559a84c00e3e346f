#pragma once
// `relpos fuzz`: random cases of every op family against the CPU reference. The families draw
// their cases (tools/op_<family>.cpp) from a FuzzRng; tools/fuzz.cpp runs them.
#include <relpos/relpos.hpp>

#include "cli_fwd.hpp"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace relpos::tool {

struct FuzzOptions {
  double seconds = 10.0;   // start no case after this
  std::uint64_t seed = 1;  // case n of seed s is always the same case
  std::string op;          // only this family (empty: all)
  std::int64_t only_case = -1;  // run just this case (a reproduction)
  bool verbose = false;    // print every case, not only failures
};
struct Registry;
// `reg`'s fuzz families name what --op takes.
void add_fuzz_options(CLI::App& cmd, FuzzOptions& o, const Registry& reg);

// Work limits of one drawn case, so that a case takes well under a second on a CPU device.
inline constexpr std::uint64_t kFuzzMaxElements = 1u << 21;  // elements an op writes
// Long K: past the 65,535 loop iterations that once cut lavapipe's loops short (the long tests go to
// 200,000); the element budget keeps such cases to few rows.
inline constexpr std::uint32_t kFuzzMaxKeys = 100000;

// A reproducible stream of draws (splitmix64, so the same on every platform) that favours the
// values where kernels go wrong: 1, primes, tile sizes and their neighbours, the ends of a range.
class FuzzRng {
 public:
  explicit FuzzRng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next();
  std::uint64_t below(std::uint64_t n);                     // [0, n)
  std::int64_t between(std::int64_t lo, std::int64_t hi);  // [lo, hi]
  bool chance(double p);
  double real(double lo, double hi);
  // A size in [lo, hi] (hi < lo gives lo): half the time an edge value, else log-uniform.
  std::uint32_t size(std::uint64_t lo, std::uint64_t hi);
  // An offset in [lo, hi]: often 0, a small value, or within a few of either end.
  std::int64_t offset(std::int64_t lo, std::int64_t hi);
  unsigned data_seed() { return static_cast<unsigned>(next() & 0x7fffffff); }
  DType float_dtype() { return chance(0.5) ? DType::F32 : DType::F16; }
  // Elements the drawn case may write: fewer where lowered limits split every binding and dispatch.
  std::uint64_t max_elements() const { return max_elements_; }
  void set_max_elements(std::uint64_t n) { max_elements_ = n; }
  template <class T>
  T pick(std::initializer_list<T> values) {
    return *(values.begin() + below(values.size()));
  }

 private:
  std::uint64_t state_;
  std::uint64_t max_elements_ = kFuzzMaxElements;
};

}  // namespace relpos::tool
