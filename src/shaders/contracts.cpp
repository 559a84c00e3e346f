// Each embedded shader's contract (contracts.hpp). tests/test_shader_contracts.cpp checks every
// one against the shader's SPIR-V.
#include "shaders/contracts.hpp"

#include <string>

#include "relpos/error.hpp"
#include "relpos_contract/attention.h"
#include "relpos_contract/cast.h"
#include "relpos_contract/distance_row.h"
#include "relpos_contract/expand.h"
#include "relpos_contract/fill.h"
#include "relpos_contract/fourier.h"
#include "relpos_contract/kv_append.h"
#include "relpos_contract/kv_cache_decode.h"
#include "relpos_contract/matmul.h"
#include "relpos_contract/rope.h"
#include "relpos_contract/shaw.h"
#include "relpos_contract/softmax.h"
#include "shaders/embedded.hpp"

namespace relpos::detail {
namespace {

template <class Spec, class Bindings>
ShaderContract contract_of() {
  return {Spec::declared, Bindings::declared};
}

}  // namespace

ShaderContract shader_contract(ShaderId shader) {
  using namespace contract;
  switch (shader) {
    case ShaderId::alibi_distance_row:
    case ShaderId::kerple_distance_row: return contract_of<WorkgroupSpec, DistanceRowBindings>();
    case ShaderId::sandwich_distance_row:
    case ShaderId::t5_distance_row: return contract_of<WorkgroupSpec, DistanceRowConstantsBindings>();
    case ShaderId::attention_fused:
    case ShaderId::attention_fused_shuffle: return contract_of<AttentionFusedSpec, AttentionBindings>();
    case ShaderId::attention_tiled:
    case ShaderId::attention_tiled_paged:
    case ShaderId::attention_tiled_shuffle:
    case ShaderId::attention_tiled_shuffle_paged: return contract_of<AttentionTiledSpec, AttentionBindings>();
    case ShaderId::attention_decode:
    case ShaderId::attention_decode_paged: return contract_of<AttentionDecodeSpec, AttentionBindings>();
    case ShaderId::attention_merge: return contract_of<AttentionMergeSpec, AttentionMergeBindings>();
    case ShaderId::cast_f16: return contract_of<CastF16Spec, CastF16Bindings>();
    case ShaderId::copy: return contract_of<FillSpec, CopyBindings>();
    case ShaderId::fill: return contract_of<FillSpec, FillBindings>();
    case ShaderId::expand_distance: return contract_of<ExpandDistanceSpec, ExpandDistanceBindings>();
    case ShaderId::expand_distance_rows: return contract_of<ExpandDistanceRowsSpec, ExpandDistanceRowsBindings>();
    case ShaderId::expand_shift: return contract_of<ExpandShiftSpec, ExpandShiftBindings>();
    case ShaderId::fourier_direct: return contract_of<FourierDirectSpec, FourierDirectBindings>();
    case ShaderId::fourier_distance_row:
    case ShaderId::fourier_distance_row_shuffle: return contract_of<FourierDistanceRowSpec, FourierDistanceRowBindings>();
    case ShaderId::sinusoidal: return contract_of<SinusoidalSpec, SinusoidalBindings>();
    case ShaderId::kv_append: return contract_of<KvAppendSpec, KvAppendBindings>();
    case ShaderId::kv_cache_decode: return contract_of<KvCacheDecodeSpec, KvCacheDecodeBindings>();
    case ShaderId::masked_softmax: return contract_of<MaskedSoftmaxSpec, MaskedSoftmaxBindings>();
    case ShaderId::matmul: return contract_of<MatmulSpec, MatmulBindings>();
    case ShaderId::matmul_shared: return contract_of<MatmulSharedSpec, MatmulBindings>();
    case ShaderId::matmul_tiled: return contract_of<MatmulTiledSpec, MatmulBindings>();
    case ShaderId::rope: return contract_of<RopeSpec, RopeBindings>();
    case ShaderId::shaw_buckets: return contract_of<ShawBucketsSpec, ShawBucketsBindings>();
    case ShaderId::shaw_gather_add: return contract_of<ShawGatherAddSpec, ShawGatherAddBindings>();
    case ShaderId::shaw_materialise: return contract_of<ShawMaterialiseSpec, ShawMaterialiseBindings>();
  }
  // A shader added without a line above (the compiler warns of the missing case).
  throw Error("internal: shader " + std::string(embedded_shader(shader).name) + " has no contract in src/shaders/contracts.cpp");
}

std::array<std::uint32_t, 3> workgroup_size(ShaderId shader, std::span<const std::uint32_t> spec) {
  std::array<std::uint32_t, 3> size{1, 1, 1};
  for (const contract::SpecConstant& c : shader_contract(shader).spec) {
    if (c.type == contract::SpecType::SizeX) size[0] = c.id < spec.size() ? spec[c.id] : c.value;
    if (c.type == contract::SpecType::SizeY) size[1] = c.id < spec.size() ? spec[c.id] : c.value;
  }
  return size;
}

namespace {
[[noreturn]] void contract_broken(ShaderId shader, const std::string& what) {
  throw Error("internal: shader " + std::string(embedded_shader(shader).name) + " " + what + " (src/shaders/contracts.cpp)");
}
}  // namespace

void check_contract(ShaderId shader, const SpecValues& spec) {
  if (spec.declared().data() != shader_contract(shader).spec.data()) contract_broken(shader, "does not take these specialisation constants");
}

void check_contract(ShaderId shader, const BindingSpans& bindings) {
  const ShaderContract c = shader_contract(shader);
  if (bindings.declared().data() != c.bindings.data()) contract_broken(shader, "does not take these bindings");
  for (const contract::Binding& b : c.bindings)
    if (!bindings.spans()[b.slot].buffer) contract_broken(shader, "is given no buffer for binding " + std::string(b.name));
}

}  // namespace relpos::detail
