#pragma once
// Rotary position embedding (docs/alibi_rope.md, RoPE): rotate pairs of q or k features by position * inv_freq,
// in place or into a new tensor, for [B, S, H, D] and [B, H, S, D] layouts, with the NeoX and
// GPT-J pairings, a partial rotary dimension, and HuggingFace's frequency scalings.
// CPU reference and GPU operations share RopeParams.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "relpos/dtype.hpp"

namespace relpos {

class Buffer;
class Context;
class Recorder;

enum class RopeLayout {
  BSHD,  // [batch, seq, heads, head_dim] (HuggingFace before the transpose, llama.cpp, vLLM)
  BHSD,  // [batch, heads, seq, head_dim] (HuggingFace's q/k after the transpose)
};

enum class RopeStyle {
  NeoX,  // GPT-NeoX / HuggingFace Llama: pairs (p, p + d/2)
  GptJ,  // GPT-J / RoFormer / Meta Llama: pairs (2p, 2p + 1)
};

enum class RopeScaling { None, Linear, DynamicNtk, Yarn, Llama3, LongRope };

// The parameters of HuggingFace modeling_rope_utils.py's rope_scaling, per type.
struct RopeScalingParams {
  RopeScaling type = RopeScaling::None;
  // Every type but None; >= 1. LongRope: max_position_embeddings / original_max_position_embeddings
  // (HuggingFace's rule where the config has both), read only for the default attention factor.
  double factor = 1.0;
  // DynamicNtk: max_position_embeddings. Yarn, Llama3 (8192 for Llama 3.1) and LongRope:
  // original_max_position_embeddings.
  std::uint32_t original_max_position = 0;
  // DynamicNtk: the current sequence length L (HuggingFace uses max(L, original_max_position)).
  // LongRope: the long factors apply where L > original_max_position (HuggingFace's
  // max(position_ids) + 1). 0: position_offset + seq (required > 0 when positions come from a
  // buffer).
  std::uint64_t seq_len = 0;
  // Yarn.
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool truncate = true;           // floor/ceil the correction range (HuggingFace's default)
  // Yarn and LongRope: the factor cos and sin are multiplied by. 0: Yarn's 0.1 * ln(factor) + 1
  // or the mscale ratio below; LongRope's sqrt(1 + ln(factor) / ln(original_max_position)), 1
  // where factor is 1.
  double attention_factor = 0.0;
  double mscale = 0.0;            // with mscale_all_dim (DeepSeek): attention factor = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
  double mscale_all_dim = 0.0;
  // Llama3.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // LongRope (Phi-3, Phi-3.5, Phi-4-mini): inv_freq[p] = base^(-2p/d) / ext[p], ext the long
  // factors where the sequence length exceeds original_max_position, the short ones otherwise;
  // rotary_dim / 2 finite values >= 2^-64 each (an int32 position over one stays a finite float32
  // angle), float32 as HuggingFace holds them. `factor` is read only for the default
  // attention_factor. Plans and kv_append with positions from a buffer fix the table by seq_len:
  // a loop that crosses original_max_position needs a second one (docs/alibi_rope.md).
  std::vector<float> long_factor{}, short_factor{};
};

struct RopeParams {
  std::uint32_t batch = 1;
  std::uint32_t seq = 1;
  std::uint32_t heads = 1;
  std::uint32_t head_dim = 0;
  std::uint32_t rotary_dim = 0;  // d: the first d features of each head rotate, the rest pass through; 0: head_dim
  RopeLayout layout = RopeLayout::BSHD;
  RopeStyle style = RopeStyle::NeoX;
  double base = 10000.0;          // rope_theta
  // Token s of every batch row sits at position_offset + s (without a position buffer); any int32
  // position, |position_offset + s| <= 2^31 - 1.
  std::int64_t position_offset = 0;
  bool inverse = false;           // the inverse map: rotate by -angle and divide by the attention factor
  RopeScalingParams scaling;

  std::uint32_t rot_dim() const { return rotary_dim ? rotary_dim : head_dim; }
  std::uint64_t elements() const;
  // Throws InvalidArgument for empty shapes, an odd or too large rotary_dim, base <= 1, bad
  // scaling parameters, positions position_offset + s outside +-(2^31 - 1) (int32) and element
  // counts beyond what the shader indexes.
  void validate() const;
  // validate(), and what x stored as `dtype` needs: f32 or f16, f16 an even head_dim (a row owns
  // whole 32-bit words). The GPU operations check this; the reference, which takes floats, does
  // not, so that a caller computing either refuses the same inputs.
  void validate(DType dtype) const;
};

// The rotation's frequency table, as HuggingFace's rope init functions compute it (in double
// here, then rounded to float32): inv_freq[p], p < rot_dim / 2, and the factor cos and sin are
// multiplied by (YaRN's and LongRoPE's attention factor; 1 otherwise). `positions` given: a
// dynamic NTK or LongRoPE seq_len of 0 is an error (the sequence length is not position_offset +
// seq).
struct RopeFrequencies {
  std::vector<float> inv_freq;
  float attention_factor = 1.0f;
};
RopeFrequencies rope_frequencies(const RopeParams& p, bool positions_from_buffer = false);

// ---- CPU reference ------------------------------------------------------------------------

// Rotates x (the layout's [.., head_dim] values, as float) in place: angle = float32(float32(pos)
// * inv_freq[p]) as HuggingFace's float32 product; cos, sin and the rotation in double; the result
// rounded to float32. positions: int32 [batch, seq] (any int32 value), or empty for
// position_offset + s.
void rope_reference(const RopeParams& p, std::span<float> x, std::span<const std::int32_t> positions = {});

// ---- GPU operations -----------------------------------------------------------------------
// Record into `r`; nothing runs until it is submitted. Parameters and buffer sizes are checked
// first (InvalidArgument). x and out hold p.elements() values of dtype (F32 or F16; F16 needs an
// even head_dim). positions, when given, is an int32 [batch, seq] buffer; any int32 value rotates
// correctly. Rows that are not a multiple of four pairs (rotary_dim % 8 != 0 or head_dim % 4 != 0)
// are rotated element by element in one shader invocation each: rotary_dim / 2 plus, out of
// place, head_dim - rotary_dim must be < 32768 (RELPOS_MAX_LOOP_ITERATIONS).

// In place.
void rope(Recorder& r, const RopeParams& p, const Buffer& x, DType dtype = DType::F32, const Buffer* positions = nullptr);
// Into `out` (the pass-through features are copied); out may be x itself.
void rope_into(Recorder& r, const RopeParams& p, const Buffer& x, const Buffer& out, DType dtype = DType::F32,
               const Buffer* positions = nullptr);

// ---- Hot loops ----------------------------------------------------------------------------

// What changes from one step to the next.
struct RopeStep {
  std::uint32_t seq = 1;
  std::int64_t position_offset = 0;  // without a position buffer: token s sits at position_offset + s
};

// RoPE for hot loops (decoding): built once for the largest step (`envelope.seq` is the most a
// step takes; every other field holds for all steps, envelope.position_offset is ignored), dtype,
// in place or not, positions from a buffer or not. It compiles the pipeline and holds the frequency
// table's buffer and descriptor sets, so that recording a step creates nothing; the table of each
// step travels in the command buffer (dynamic NTK's and LongRoPE's follow the step's last
// position, or with a position buffer the envelope's seq_len). Recording gives
// what rope()/rope_into() give for the envelope with the step's seq and position_offset, bit for
// bit; the same rules as AttentionPlan's hold for command buffers, threads and its lifetime.
class RopePlan {
 public:
  RopePlan(Context& ctx, const RopeParams& envelope, DType dtype = DType::F32, bool in_place = true, bool positions = false);
  ~RopePlan();
  RopePlan(RopePlan&&) noexcept;
  RopePlan& operator=(RopePlan&&) noexcept;
  // x (and out, unless in place) hold the step's elements; positions: int32 [batch, step seq].
  void record(Recorder& r, const RopeStep& step, const Buffer& x, const Buffer* out = nullptr, const Buffer* positions = nullptr);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace relpos
