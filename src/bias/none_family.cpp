// No position bias: q·kᵀ·scale and the masks only.
#include "bias/bias_family.hpp"
#include "relpos_push/attention.h"

namespace relpos::detail {

extern const BiasFamily kNoBias{.info = {.bias = AttentionBias::None, .name = "none"}, .kernel_mode = RELPOS_ATTN_NONE};

}  // namespace relpos::detail
