// The batched matmul on the GPU: operands bound as windows (batches and rows split to fit
// maxStorageBufferRange), tiles split to fit maxComputeWorkGroupCount.
#include "ops/matmul.hpp"

#include <algorithm>
#include <string>

#include "ops/planner.hpp"
#include "relpos/context.hpp"
#include "relpos_contract/cast.h"
#include "relpos_contract/matmul.h"
#include "relpos_push/cast.h"
#include "relpos_push/loop_bound.h"
#include "relpos_push/matmul.h"
#include "vk/access.hpp"

namespace relpos::detail {
namespace {

constexpr std::uint32_t kCastGroup = 64;
constexpr std::uint32_t kMatmulGroup = 64;  // invocations; a tile uses tx * ty of them
constexpr std::uint64_t kRows = RELPOS_MATMUL_ROWS;  // rows of C per invocation of matmul.comp
constexpr std::uint32_t kSharedRows = 2;             // rows of C per lane in matmul_shared.comp (its RM)
// matmul_tiled.comp's tile of C, the GPU kernel class's kernel for quad-aligned operands.
constexpr std::uint64_t kTiledRows = RELPOS_MATMUL_TILED_ROWS, kTiledCols = RELPOS_MATMUL_TILED_COLS;
// The shared dimension one dispatch walks: both kernels run one loop iteration per element of it
// (per quad with quad loads), so longer ones (weights·v over 100k keys) are split into dispatches
// that add into C, within the loop bound. A multiple of 4 keeps every part's quads aligned.
constexpr std::uint32_t kMaxDepth = RELPOS_MAX_LOOP_ITERATIONS / 2;
static_assert(kMaxDepth % 4 == 0);

// matmul_shared.comp's tile, where it applies: a CPU device whose subgroups can shuffle (each
// storage load there is a loop over the subgroup's lanes, so sharing B's loads is what pays), and
// enough rows to give each lane its own. Quad alignment is decided per dispatch.
struct SharedTile {
  bool use = false;
  std::uint32_t lanes = 0;  // workgroup: whole subgroups
  std::uint32_t sub = 0;    // subgroup size
  std::uint32_t quads = 0;  // column quads per tile (NQ)
  std::uint64_t rows() const { return std::uint64_t{lanes} * kSharedRows; }
};

SharedTile shared_tile(const Context& ctx, const MatmulParams& p) {
  const std::uint32_t sub = load_sharing_subgroup(ctx, kMatmulGroup);
  SharedTile t;
  if (sub == 0 || p.m < 2ull * sub * kSharedRows) return t;
  t.use = true;
  t.sub = sub;
  const std::uint64_t subgroups = (p.m + std::uint64_t{sub} * kSharedRows - 1) / (std::uint64_t{sub} * kSharedRows);
  t.lanes = sub * static_cast<std::uint32_t>(std::min<std::uint64_t>(subgroups, kMatmulGroup / sub));
  // Column tiles of 8, 16 or 32: the one with the fewest lane-loop instructions per step of the
  // shared dimension (a quad load costs about 160 over the eight lanes, a shuffle 4 per value, a
  // multiply-add 1), so 2k + 1 = 33 columns take tiles of 16 and 129 take tiles of 32.
  double best = 0;
  for (std::uint32_t nq : {2u, 4u, 8u}) {
    const std::uint32_t nc = 4 * nq;
    const double tiles = static_cast<double>((p.n + nc - 1) / nc);
    const double cost = tiles * ((kSharedRows + (nc + sub - 1) / sub) * 160.0 + nc * 4.0 + kSharedRows * nc * 4.0);
    if (t.quads == 0 || cost < best) best = cost, t.quads = nq;
  }
  return t;
}


struct Plan {
  std::uint32_t tx = 8, ty = 8;       // invocations of a workgroup across columns and rows
  std::uint64_t batches_per = 1;      // batches per dispatch (gl_WorkGroupID.z)
  std::uint64_t rows_per = 0;         // rows of C per dispatch
  std::uint64_t cols_per = 0;         // columns of C per dispatch
  std::uint64_t a_extent = 0, b_extent = 0, c_extent = 0;  // elements of one batch's window
};

// Elements of one batch of B that `cols` columns of C read over `depth` of the shared dimension.
std::uint64_t b_extent(const MatmulParams& p, std::uint64_t cols, std::uint64_t depth) {
  return p.b_transposed ? (cols - 1) * p.b_row_stride + depth : (depth - 1) * p.b_row_stride + cols;
}
std::uint64_t b_extent(const MatmulParams& p, std::uint64_t cols) { return b_extent(p, cols, p.k); }

// An f16 C whose element pairs may straddle two invocations' blocks, or that the parts of a long
// shared dimension would round once per part, is written through an f32 scratch and a cast that
// owns whole words.
bool c_needs_staging(const MatmulParams& p) {
  return p.c_dtype == DType::F16 && (p.c_row_stride % 2 != 0 || (p.batch > 1 && p.c_batch_stride % 2 != 0) || p.k > kMaxDepth);
}

// The GPU kernel class: matmul_tiled wherever the operands allow quad loads.
bool gpu_tiles(const Context& ctx) { return ctx.tuning().kernels == Kernels::Gpu; }

Plan plan(const DeviceLimits& lim, const MatmulParams& p, const SharedTile& st, bool tiled) {
  Plan pl;
  // Tiles shaped to the matrix: a skinny C (few columns, as P = q·rel_keysᵀ with 2k+1 of them,
  // or few rows, as tensor2tensor's per-query matmul) gets a skinny tile, and the columns are
  // shared evenly between tiles of at most 16 quads (129 columns: 3 tiles of 11 quads, not 5 of 8).
  const std::uint64_t quads = (p.n + 3) / 4, row_quads = (p.m + kRows - 1) / kRows;
  const std::uint64_t col_tiles = (quads + 15) / 16;
  pl.tx = static_cast<std::uint32_t>((quads + col_tiles - 1) / col_tiles);
  pl.ty = static_cast<std::uint32_t>(std::min<std::uint64_t>(std::max<std::uint32_t>(kMatmulGroup / pl.tx, 1), row_quads));
  // Few rows: the idle invocations take more columns instead.
  pl.tx = static_cast<std::uint32_t>(std::max<std::uint64_t>(pl.tx, std::min<std::uint64_t>(quads, kMatmulGroup / pl.ty)));
  const std::uint32_t ea = dtype_size(p.a_dtype), eb = dtype_size(p.b_dtype);
  const std::uint32_t ec = c_needs_staging(p) ? 4 : dtype_size(p.c_dtype);
  pl.a_extent = (p.m - 1ull) * p.a_row_stride + p.k;
  pl.b_extent = b_extent(p, p.n);
  pl.c_extent = (p.m - 1ull) * p.c_row_stride + p.n;
  const std::uint64_t cap_a = window_capacity(lim, ea), cap_b = window_capacity(lim, eb), cap_c = window_capacity(lim, ec);
  pl.cols_per = p.n;
  if (pl.b_extent > cap_b) {
    // Columns of C split: a range of B's rows (NT) or of every row's columns (NN).
    const std::uint64_t fixed = p.b_transposed ? p.k : (p.k - 1ull) * p.b_row_stride;
    require(cap_b > fixed, "matmul B", std::to_string(pl.b_extent) + " elements per batch",
            "even one column of B must fit one storage buffer binding of the device (" + std::to_string(cap_b) + " elements)");
    pl.cols_per = p.b_transposed ? 1 + (cap_b - fixed) / p.b_row_stride : cap_b - fixed;
    // Whole quads keep quad loads possible; with f16 C, an odd split would leave two dispatches
    // writing the halves of one word.
    pl.cols_per = pl.cols_per >= 4 ? pl.cols_per / 4 * 4 : pl.cols_per / 2 * 2 + (pl.cols_per == 1);
    require(pl.cols_per >= 2 || ec == 4, "matmul B", std::to_string(pl.b_extent) + " elements per batch",
            "an f16 C needs two columns of B to fit one storage buffer binding of the device");
    pl.b_extent = b_extent(p, pl.cols_per);
  }
  const std::uint64_t max_z = lim.max_workgroup_count[2];
  if (pl.a_extent <= cap_a && pl.c_extent <= cap_c) {
    pl.rows_per = p.m;
    std::uint64_t nb = std::min<std::uint64_t>(max_z, p.batch);
    auto limit = [&](std::uint64_t stride, std::uint64_t extent, std::uint64_t cap) {
      if (stride) nb = std::min(nb, 1 + (cap - extent) / stride);
    };
    limit(p.a_batch_stride, pl.a_extent, cap_a);
    limit(p.b_batch_stride, pl.b_extent, cap_b);
    limit(p.c_batch_stride, pl.c_extent, cap_c);
    pl.batches_per = nb;
  } else {
    require(p.k <= cap_a && p.n <= cap_c, "matmul row", std::to_string(std::max(p.k, p.n)) + " elements",
            "a row of A and of C must fit one storage buffer binding of the device");
    // Each dispatch starts its own tiles at its first row: any row count per dispatch works.
    pl.rows_per = std::min(1 + (cap_a - p.k) / p.a_row_stride, 1 + (cap_c - p.n) / p.c_row_stride);
    if (pl.rows_per < kRows * pl.ty) pl.ty = std::min<std::uint32_t>(pl.ty, static_cast<std::uint32_t>((pl.rows_per + kRows - 1) / kRows));
  }
  pl.rows_per = std::min<std::uint64_t>(pl.rows_per, lim.max_workgroup_count[1] * kRows * pl.ty);
  if (st.use) pl.rows_per = std::min<std::uint64_t>(pl.rows_per, lim.max_workgroup_count[1] * st.rows());
  if (tiled) pl.rows_per = std::min<std::uint64_t>(pl.rows_per, lim.max_workgroup_count[1] * kTiledRows);
  return pl;
}

void check_size(const Buffer& b, std::uint64_t elements, DType t, const char* name) {
  require_buffer(b, elements, dtype_size(t), std::string("matmul ") + name, "the operand's strided extent");
}

// C (+)= alpha·A·B' over the shared dimension [k0, k1): one part of record_matmul.
void record_depth_part(Recorder& r, const MatmulParams& p, const Buffer& a, const Buffer& b, const Buffer& c, std::uint64_t k0,
                       std::uint64_t k1, bool accumulate) {
  const DeviceLimits& lim = r.context().limits();
  const SharedTile st = shared_tile(r.context(), p);
  const bool tiled = gpu_tiles(r.context());
  const Plan pl = plan(lim, p, st, tiled);
  const std::uint32_t ea = dtype_size(p.a_dtype), eb = dtype_size(p.b_dtype), ec = dtype_size(p.c_dtype);
  const std::uint32_t c_mode = (p.c_dtype == DType::F16 ? 1u : 0u) + (accumulate ? 2u : 0u);
  const std::uint64_t tm = kRows * pl.ty, tn = 4ull * pl.tx;
  push::MatmulPush pc{};
  pc.k = static_cast<std::uint32_t>(k1 - k0);
  pc.a_bs = static_cast<std::uint32_t>(p.a_batch_stride);
  pc.a_rs = static_cast<std::uint32_t>(p.a_row_stride);
  pc.b_bs = static_cast<std::uint32_t>(p.b_batch_stride);
  pc.b_rs = static_cast<std::uint32_t>(p.b_row_stride);
  pc.c_bs = static_cast<std::uint32_t>(p.c_batch_stride);
  pc.c_rs = static_cast<std::uint32_t>(p.c_row_stride);
  pc.alpha = p.alpha;
  pc.tx = pl.tx;
  pc.ty = pl.ty;
  auto quad = [](std::uint64_t x) { return x % 4 == 0; };
  for (std::uint64_t b0 = 0; b0 < p.batch; b0 += pl.batches_per) {
    const std::uint64_t nb = std::min<std::uint64_t>(pl.batches_per, p.batch - b0);
    for (std::uint64_t m0 = 0; m0 < p.m; m0 += pl.rows_per) {
      const std::uint64_t m1 = std::min<std::uint64_t>(p.m, m0 + pl.rows_per);
      const Window wa = window(lim, a, b0 * p.a_batch_stride + m0 * p.a_row_stride + k0,
                               (b0 + nb - 1) * p.a_batch_stride + (m1 - 1) * p.a_row_stride + k1, ea);
      const Window wc = window(lim, c, b0 * p.c_batch_stride + m0 * p.c_row_stride,
                               (b0 + nb - 1) * p.c_batch_stride + (m1 - 1) * p.c_row_stride + p.n, ec);
      for (std::uint64_t n0 = 0; n0 < p.n; n0 += pl.cols_per) {
        const std::uint64_t n1 = std::min<std::uint64_t>(p.n, n0 + pl.cols_per);
        const std::uint64_t b_first = b0 * p.b_batch_stride + (p.b_transposed ? n0 * p.b_row_stride + k0 : n0 + k0 * p.b_row_stride);
        const Window wb = window(lim, b, b_first, b_first + (nb - 1) * p.b_batch_stride + b_extent(p, n1 - n0, k1 - k0), eb);
        const bool vec4 = quad(k1 - k0) && (p.b_transposed || quad(n1 - n0)) && quad(wa.base) && quad(p.a_row_stride) &&
                          (nb == 1 || quad(p.a_batch_stride)) && quad(wb.base) && quad(p.b_row_stride) &&
                          (nb == 1 || quad(p.b_batch_stride));
        pc.m = static_cast<std::uint32_t>(m1 - m0);
        pc.n = static_cast<std::uint32_t>(n1 - n0);
        pc.a_base = wa.base;
        pc.b_base = wb.base;
        pc.c_base = static_cast<std::uint32_t>(wc.base + n0);
        const bool a16 = p.a_dtype == DType::F16, b16 = p.b_dtype == DType::F16, bt = p.b_transposed;
        // With quad loads: matmul_tiled (GPU kernels) or matmul_shared (CPU kernels on a device
        // whose subgroups shuffle); matmul.comp otherwise.
        const bool shared = vec4 && st.use, gpu_tiled = vec4 && tiled && !shared;
        const ShaderId shader = gpu_tiled ? ShaderId::matmul_tiled : shared ? ShaderId::matmul_shared : ShaderId::matmul;
        const SpecValues spec =
            gpu_tiled ? SpecValues(contract::MatmulTiledSpec{.WG_X = kMatmulGroup, .B_T = bt, .A_F16 = a16, .B_F16 = b16, .C_MODE = c_mode})
            : shared  ? SpecValues(contract::MatmulSharedSpec{.WG_X = st.lanes,
                                                              .SG = st.sub,
                                                              .A_F16 = a16,
                                                              .B_F16 = b16,
                                                              .C_MODE = c_mode,
                                                              .RM = kSharedRows,
                                                              .NQ = st.quads,
                                                              .B_T = bt})
                      : SpecValues(contract::MatmulSpec{.WG_X = kMatmulGroup, .B_T = bt, .A_F16 = a16, .B_F16 = b16, .C_MODE = c_mode, .VEC4 = vec4});
        const std::uint64_t tile_rows = gpu_tiled ? kTiledRows : shared ? st.rows() : tm;
        const std::uint64_t tile_cols = gpu_tiled ? kTiledCols : shared ? 4ull * st.quads : tn;
        for_each_group_range(lim, div_up(n1 - n0, tile_cols), [&](std::uint64_t first, std::uint32_t groups) {
          pc.tile_n0 = static_cast<std::uint32_t>(first);
          dispatch(r, shader, spec, contract::MatmulBindings{.A = wa.span, .B = wb.span, .C = wc.span}, pc, groups, div_up(m1 - m0, tile_rows),
                   static_cast<std::uint32_t>(nb));
        });
      }
    }
  }
}

}  // namespace

void check_matmul_plan(const Recorder& r, const MatmulParams& p) {
  p.validate();
  if (c_needs_staging(p))
    require(p.c_row_stride == p.n && (p.batch == 1 || p.c_batch_stride == std::uint64_t{p.m} * p.n), "c_row_stride",
            std::to_string(p.c_row_stride),
            "an f16 C with odd strides, or with k > " + std::to_string(kMaxDepth) +
                ", must be dense (c_row_stride = n, c_batch_stride = m * n)");
  (void)plan(r.context().limits(), p, shared_tile(r.context(), p), gpu_tiles(r.context()));
}

void check_matmul(const Recorder& r, const MatmulParams& p, const Buffer& a, const Buffer& b, const Buffer& c) {
  check_matmul_plan(r, p);
  check_size(a, p.a_elements(), p.a_dtype, "A");
  check_size(b, p.b_elements(), p.b_dtype, "B");
  check_size(c, p.c_elements(), p.c_dtype, "C");
}

void record_matmul(Recorder& r, const MatmulParams& p, const Buffer& a, const Buffer& b, const Buffer& c) {
  check_matmul(r, p, a, b, c);
  if (c_needs_staging(p)) {
    MatmulParams f32 = p;
    f32.c_dtype = DType::F32;
    f32.accumulate = false;
    Buffer& staged = scratch(r, p.c_elements() * 4, MemoryUse::Device);
    record_matmul(r, f32, a, b, staged);
    barrier(r);
    record_cast_f16(r, staged, c, p.c_elements(), p.accumulate);
    return;
  }
  for (std::uint64_t k0 = 0; k0 < p.k; k0 += kMaxDepth) {
    if (k0 > 0) barrier(r);  // the parts add into the same C
    record_depth_part(r, p, a, b, c, k0, std::min<std::uint64_t>(p.k, k0 + kMaxDepth), p.accumulate || k0 > 0);
  }
}

void record_cast_f16(Recorder& r, const Buffer& in, const Buffer& out, std::uint64_t count, bool add) {
  const DeviceLimits& lim = r.context().limits();
  // Chunks of an even number of elements keep every output word inside one chunk.
  const std::uint64_t per_chunk =
      std::min<std::uint64_t>(window_capacity(lim, 4), std::uint64_t{lim.max_workgroup_count[0]} * kCastGroup * 2) / 2 * 2;
  for (std::uint64_t first = 0; first < count; first += per_chunk) {
    const std::uint64_t n = std::min(per_chunk, count - first);
    const Window wi = window(lim, in, first, first + n, 4);
    const Window wo = window(lim, out, first, first + n, 2);
    push::CastPush pc{static_cast<std::uint32_t>(n), wi.base, wo.base};
    dispatch(r, detail::ShaderId::cast_f16, contract::CastF16Spec{.WG_X = kCastGroup, .ADD = add},
             contract::CastF16Bindings{.IN_F32 = wi.span, .OUT_F16 = wo.span}, pc, div_up((wo.base % 2 + n + 1) / 2, kCastGroup));
  }
}

}  // namespace relpos::detail

namespace relpos {

void matmul(Recorder& r, const MatmulParams& p, const Buffer& a, const Buffer& b, const Buffer& c) {
  detail::check_matmul(r, p, a, b, c);
  // C written while A and B are read, tile by tile: C over either gave wrong products.
  detail::require_own_buffers(r, {{&a, "A buffer"}, {&b, "B buffer"}, {&c, "C buffer", true}});
  const auto op = detail::begin_op(r);
  detail::record_matmul(r, p, a, b, c);
}

}  // namespace relpos
