// relpos fuzz: random cases of every op family, each run on the GPU and by the CPU reference and
// compared as `relpos check` compares them (integers exactly, floats within the bound of the op).
#include "number_flags.hpp"
#include "fuzz.hpp"
#include "numbers.hpp"

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "registry.hpp"
#include "testing_options.hpp"

namespace relpos::tool {

std::uint64_t FuzzRng::next() {
  std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::uint64_t FuzzRng::below(std::uint64_t n) { return n <= 1 ? 0 : next() % n; }

std::int64_t FuzzRng::between(std::int64_t lo, std::int64_t hi) {
  if (hi <= lo) return lo;
  return lo + static_cast<std::int64_t>(below(static_cast<std::uint64_t>(hi - lo) + 1));
}

bool FuzzRng::chance(double p) { return real(0.0, 1.0) < p; }

double FuzzRng::real(double lo, double hi) { return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1p-53; }

std::uint32_t FuzzRng::size(std::uint64_t lo, std::uint64_t hi) {
  hi = std::min<std::uint64_t>(std::max(hi, lo), 0xffffffffull);
  if (chance(0.5)) {
    // Where tiles, vectors, subgroups and workgroups end: 1, primes, powers of two and their
    // neighbours, and the ends of the range.
    static constexpr std::uint64_t kEdges[] = {1,   2,   3,   4,   5,   7,    8,    9,    13,   15,   16,   17,   31,   32,
                                               33,  61,  63,  64,  65,  127,  128,  129,  251,  255,  256,  257,  509,  511,
                                               512, 513, 1021, 1023, 1024, 1025, 2047, 2048, 2049, 4093, 4095, 4096, 4097, 8191,
                                               8192, 8193, 16383, 16384, 16385, 65535, 65536, 65537};
    std::uint64_t picks[std::size(kEdges) + 4];
    std::size_t n = 0;
    for (std::uint64_t e : kEdges)
      if (e >= lo && e <= hi) picks[n++] = e;
    for (std::uint64_t e : {lo, lo + 1, hi, hi - 1})
      if (e >= lo && e <= hi) picks[n++] = e;
    return static_cast<std::uint32_t>(picks[below(n)]);
  }
  const double x = std::exp(real(std::log(static_cast<double>(lo)), std::log(static_cast<double>(hi) + 1.0)));
  return static_cast<std::uint32_t>(std::clamp<std::uint64_t>(static_cast<std::uint64_t>(x), lo, hi));
}

std::int64_t FuzzRng::offset(std::int64_t lo, std::int64_t hi) {
  if (hi <= lo) return lo;
  switch (below(6)) {
    case 0: return std::clamp<std::int64_t>(0, lo, hi);
    case 1: return std::clamp<std::int64_t>(between(-300, 300), lo, hi);
    case 2: return std::min(hi, lo + between(0, 3));
    case 3: return std::max(lo, hi - between(0, 3));
    default: return between(lo, hi);
  }
}

void add_fuzz_options(CLI::App& cmd, FuzzOptions& o, const Registry& reg) {
  add_number(cmd, "--seconds", o.seconds, "start no new case after this many seconds (default 10)", 0.0, 1e9);
  add_number(cmd, "--seed", o.seed, "case n of a seed is always the same case (default 1)");
  std::string families;
  for (const auto& f : reg.fuzz) families += (families.empty() ? "" : ", ") + f.name;
  cmd.add_option("--op", o.op, "only this family: " + families);
  add_number(cmd, "--case", o.only_case, "run only case N of the seed (what a failure line prints)", std::int64_t{0});
  cmd.add_flag("--verbose", o.verbose, "print every case, not only the failures");
}

namespace {

// Where a case runs: the device's own limits, or limits lowered by TestingOptions so
// that small tensors take the split paths (bindings beyond maxStorageBufferRange, dispatches beyond
// maxComputeWorkGroupCount) cheaply, with each per-distance expansion path and, in one, the
// kernels of devices without subgroup shuffles.
struct Target {
  const char* name;
  std::uint64_t max_storage_buffer_range;  // 0: the device's
  std::uint32_t max_workgroup_count;
  DistanceExpansion expansion;
  bool no_subgroup_shuffles;
  std::uint64_t max_elements;  // smaller cases where every binding and dispatch splits
};
constexpr std::array<Target, 3> kTargets = {{
    {"device", 0, 0, DistanceExpansion::Auto, false, kFuzzMaxElements},
    {"range=64KiB,groups=7,shader", 64 * 1024, 7, DistanceExpansion::Shader, false, kFuzzMaxElements / 4},
    {"range=16KiB,groups=3,copies,no-shuffles", 16 * 1024, 3, DistanceExpansion::Copies, true, kFuzzMaxElements / 16},
}};

// An op's refusal of a shape the lowered limits cannot bind (one row larger than the binding
// range): a clear error, as it should be, not a failure; the case then runs at the device's limits.
bool refused_for_limits(const std::string& error) {
  for (const char* s : {"maxStorageBufferRange", "storage buffer binding of the device", "the device dispatches"})
    if (error.find(s) != std::string::npos) return true;
  return false;
}

std::uint64_t case_seed(std::uint64_t seed, std::uint64_t n) {
  FuzzRng mix(seed * 0x100000001b3ull + n);
  return mix.next();
}

}  // namespace

int fuzz_command(Registry& reg, const FuzzOptions& o) {
  std::vector<const FuzzFamily*> families;
  std::string names;
  for (const auto& f : reg.fuzz) {
    names += (names.empty() ? "" : ", ") + f.name;
    if (o.op.empty() || f.name == o.op) families.push_back(&f);
  }
  if (families.empty()) throw InvalidArgument("--op " + o.op + ": no such op family; one of " + names);

  const ContextOptions base = tool_context_options();
  // Each context takes its own expansion path (kTargets): a global one would be silently overridden.
  if (base.tuning.distance_expansion != DistanceExpansion::Auto)
    throw InvalidArgument("--expansion: not taken by fuzz, whose contexts take each path in turn (" + std::string(kTargets[0].name) + ": the "
                          "device's own; " + kTargets[1].name + "; " + kTargets[2].name + ")");
  std::array<std::optional<Context>, kTargets.size()> contexts;
  auto context = [&](std::size_t t) -> Context& {
    if (!contexts[t]) {
      ContextOptions c = base;
      c.tuning.distance_expansion = kTargets[t].expansion;
      detail::TestingOptions lowered;
      lowered.max_storage_buffer_range = kTargets[t].max_storage_buffer_range;
      lowered.max_workgroup_count = kTargets[t].max_workgroup_count;
      lowered.no_subgroup_shuffles = kTargets[t].no_subgroup_shuffles;
      contexts[t].emplace(detail::testing_context(c, lowered));
    }
    return *contexts[t];
  };
  const Context& device = context(0);
  std::printf("relpos fuzz on %s (%s): seed %llu, %s; contexts: device limits, and lowered for split paths (%s; %s)\n",
              device.device_info().name.c_str(), std::string(device_type_name(device.device_info().type)).c_str(),
              static_cast<unsigned long long>(o.seed), o.only_case >= 0 ? ("case " + std::to_string(o.only_case)).c_str() : (std::to_string(static_cast<long long>(o.seconds)) + " s").c_str(),
              kTargets[1].name, kTargets[2].name);
  std::fflush(stdout);

  // What reproduces a case: the same device, kernel class and validation, the seed, the case and
  // --op. The class as the context resolved it (--kernels or RELPOS_KERNELS), where it was chosen.
  std::string repro = "relpos";
  if (!base.device.empty()) repro += " --device '" + base.device + "'";
  if (base.tuning.kernels != Kernels::Auto || std::getenv("RELPOS_KERNELS"))
    repro += std::string(" --kernels ") + (device.tuning().kernels == Kernels::Gpu ? "gpu" : "cpu");
  if (device.validation_enabled()) repro += " --validation";
  repro += " fuzz --seed " + std::to_string(o.seed) + (o.op.empty() ? "" : " --op " + o.op) + " --case ";

  std::uint64_t cases = 0, failed = 0, messages_in_cases = 0;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  for (std::uint64_t n = o.only_case >= 0 ? static_cast<std::uint64_t>(o.only_case) : 0;; ++n) {
    if (o.only_case < 0 && cases > 0 && elapsed() >= o.seconds) break;
    FuzzRng g(case_seed(o.seed, n));
    const FuzzFamily& family = *families[g.below(families.size())];
    std::size_t t = g.below(kTargets.size());
    g.set_max_elements(kTargets[t].max_elements);
    const CheckCase c = family.draw(g);
    const double case_start = elapsed();
    CaseOutcome out = run_check_case(context(t), c.run);
    messages_in_cases += out.validation_messages;
    if (!out.ok() && t != 0 && out.validation_messages == 0 && refused_for_limits(out.error)) {
      t = 0;
      out = run_check_case(context(t), c.run);
      messages_in_cases += out.validation_messages;
    }
    ++cases;
    if (!out.ok()) ++failed;
    if (!out.ok() || o.verbose)
      std::printf("%s %s %s [%s] %s (%.1f s): %s%llu\n", out.ok() ? "PASS" : "FAIL", c.op.c_str(), c.shape.c_str(), kTargets[t].name,
                  out.describe().c_str(), elapsed() - case_start, repro.c_str(), static_cast<unsigned long long>(n));
    std::fflush(stdout);
    if (o.only_case >= 0) break;
  }
  std::uint64_t messages = 0;
  for (const auto& c : contexts)
    if (c) messages += c->validation_message_count();
  if (messages > messages_in_cases) {
    std::printf("FAIL validation: %llu message(s) from the validation layers outside the cases\n",
                static_cast<unsigned long long>(messages - messages_in_cases));
    ++failed;
  }
  std::printf("fuzz: %llu cases, %llu failed\n", static_cast<unsigned long long>(cases), static_cast<unsigned long long>(failed));
  return failed == 0 ? 0 : 1;
}

}  // namespace relpos::tool
