#pragma once
// relpos: Vulkan compute shaders for the relative position encodings of transformer attention.
#include "relpos/buffer.hpp"
#include "relpos/context.hpp"
#include "relpos/dtype.hpp"
#include "relpos/error.hpp"
#include "relpos/half.hpp"
#include "relpos/npy.hpp"
#include "relpos/recorder.hpp"
#include "relpos/t5.hpp"
#include "relpos/unfused_attention.hpp"
#include "relpos/shaw.hpp"
#include "relpos/compare.hpp"
#include "relpos/ceiling.hpp"
