// The bias registry: every family fused attention takes, one line each (bias_family.hpp).
#include <algorithm>
#include <array>
#include <string>

#include "bias/bias_family.hpp"
#include "params/checks.hpp"

namespace relpos {
namespace detail {

extern const BiasFamily kNoBias, kT5Bias, kDistanceBias, kAlibiBias, kShawBias, kDenseBias, kKerpleBias, kSandwichBias;

namespace {
const std::array kFamilies = {&kNoBias, &kT5Bias, &kDistanceBias, &kAlibiBias, &kShawBias, &kDenseBias, &kKerpleBias, &kSandwichBias};
}  // namespace

std::span<const BiasFamily* const> bias_families() { return kFamilies; }

const BiasFamily& bias_family(AttentionBias bias) {
  for (const BiasFamily* f : kFamilies)
    if (f->info.bias == bias) return *f;
  require(false, "bias", std::to_string(static_cast<std::uint32_t>(bias)), "is no bias family (relpos::attention_biases() lists them)");
  return kNoBias;
}

}  // namespace detail

std::span<const AttentionBiasInfo> attention_biases() {
  static const auto infos = [] {
    std::array<AttentionBiasInfo, detail::kFamilies.size()> out;
    std::transform(detail::kFamilies.begin(), detail::kFamilies.end(), out.begin(), [](const detail::BiasFamily* f) { return f->info; });
    return out;
  }();
  return infos;
}

const AttentionBiasInfo& attention_bias_info(AttentionBias bias) { return detail::bias_family(bias).info; }

std::optional<AttentionBias> attention_bias_named(std::string_view name) {
  for (const detail::BiasFamily* f : detail::kFamilies)
    if (f->info.name == name) return f->info.bias;
  return std::nullopt;
}

}  // namespace relpos
