// The body of attend's key loop (attention_fused.glsl): one block of KEY_BLOCK keys from j0,
// scored, rescaled and accumulated. Included twice, inside the loop of the blocks that need no guard
// and inside that of the blocks that do, with GUARDED defined false or true: a key of weight
// exactly 0 (masked for the row) then adds nothing to it, not 0 * v. One text, so that the two
// loops cannot drift apart. No include guard: it is meant to be included again.
    const uint n = min(KEY_BLOCK, j_end - j0);
    float sc[ROWS * KEY_BLOCK];
    float block_max[ROWS];
    [[unroll]] for (uint r = 0u; r < ROWS; ++r) block_max[r] = NEG_INF;
    // Shared loads: a lane past the end reloads the last key (finite; its scores are masked).
    const uint j_mine = min(j0 + LANE_IN_SUBGROUP, j_end - 1u);
    vec4 mine[D4];
    // Each key's word found once, not per load: a compiler need not know that the table is not
    // written between them (lavapipe looked it up again for every load of the key).
    const uint mine_word = SHARE_LOADS != 0u ? key_word(kv_word, b, hk, j_mine) : 0u;
    if (SHARE_LOADS != 0u) [[unroll]] for (uint d = 0u; d < D4; ++d) mine[d] = load_k(mine_word + d);
    const uint u_end = SHARE_LOADS != 0u ? KEY_BLOCK : n;  // a constant bound when shared: unrolled
    // The per-distance row, shared too: lane L's row reads it at bias_base[r] + j, one below the
    // previous lane's, so the block's keys over the subgroup's lanes read 2 * KEY_BLOCK - 1
    // consecutive values. Each lane loads two (lo: t = u - L in [1 - KEY_BLOCK, 0], hi: t in
    // [1, KEY_BLOCK]) and takes the others' by shuffle. Indices are clamped into the binding: only
    // those of masked keys (past the end, or j < M where bias_base wraps) leave it.
    float bias_lo[ROWS], bias_hi[ROWS];
    if (SHARE_BIAS) {
      const uint last = uint(bias.length()) - 1u;
      [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
        const uint at = share_base[r] + j0 + LANE_IN_SUBGROUP;
        bias_lo[r] = bias[min(at - (KEY_BLOCK - 1u), last)];
        bias_hi[r] = bias[min(at + 1u, last)];
      }
    }
    for (uint u = 0u; u < u_end; ++u) {
      const uint j = j0 + u;
      const uint jb = min(j, j_end - 1u);  // past the end (shared loads only): any in-range bias
      vec4 key[D4];  // loaded once for all rows
      const uint key_at = SHARE_LOADS != 0u ? 0u : key_word(kv_word, b, hk, j);
      if (SHARE_LOADS == 0u) load_kv_row(key_at, false, key);
      else [[unroll]] for (uint d = 0u; d < D4; ++d) key[d] = SHARE_LOADS != 0u ? SHARED_LOAD(mine[d], u) : load_k(key_at + d);
      [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
        float x = 0.0;
        [[unroll]] for (uint d = 0u; d < D4; ++d) x += dot(q[r * D4 + d], key[d]);
        if (j >= M && BIAS_MODE != RELPOS_ATTN_NONE) {
          const int rp = int(j) + rp_base[r];
          if (SHARE_BIAS) {
            const int t = int(u) - int(LANE_IN_SUBGROUP);
            const float lo = SHARED_LOAD(bias_lo[r], uint(t + int(KEY_BLOCK) - 1) & (KEY_BLOCK - 1u));
            const float hi = SHARED_LOAD(bias_hi[r], uint(t - 1) & (KEY_BLOCK - 1u));
            x += t <= 0 ? lo : hi;
          } else if (BIAS_MODE == RELPOS_ATTN_ROW || BIAS_MODE == RELPOS_ATTN_DENSE) {
            x += bias[bias_base[r] + jb];
          } else if (BIAS_MODE == RELPOS_ATTN_ALIBI) {
            x = alibi_score(x, slope[r], rp, near_bias[r]);
          } else {
            const uint idx = uint(clamp(rp, -kk, kk) + kk);
            if (idx == 0u) x += p_lo[r];
            else if (idx == last_rel) x += p_hi[r];
            else if (SHAW_LOCAL) x += rel_score[r * SLOTS + idx - 1u];
            else {  // near the diagonal only; unrolled, so it takes nothing of the loop bound
              float pr = 0.0;
              [[unroll]] for (uint d = 0u; d < D4; ++d) pr += dot(q[r * D4 + d], rel_keys[idx * D4 + d]);
              x += pr;
            }
          }
        }
        x = j < lane_end[r] ? x : NEG_INF;
        sc[r * KEY_BLOCK + u] = x;
        block_max[r] = max(block_max[r], x);
      }
    }
    // Branch-free rescale: a row whose keys are all masked so far keeps m = -inf and zeros.
    [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
      const float m_new = max(m[r], block_max[r]);
      const float alpha = m[r] == NEG_INF ? 0.0 : exp(m[r] - m_new);
      m[r] = m_new;
      l[r] *= alpha;
      w_lo[r] *= alpha;
      w_hi[r] *= alpha;
      [[unroll]] for (uint d = 0u; d < D4; ++d) acc[r * D4 + d] *= alpha;
      if (SHAW_LOCAL) [[unroll]] for (uint t = 0u; t < SLOTS; ++t) rel_weight[r * SLOTS + t] *= alpha;
    }
    if (SHARE_LOADS != 0u) {
      // Each output word takes the block's values in turn, so that it is read and written once a
      // block, not once a key (lavapipe: the fused step 1.1-1.16x faster); the same sums in the
      // same order.
      // A lane past the end reloaded the last key, whose weight there is 0: its value is taken as
      // zeros, so that an infinite value of the last key (which the rows see) does not come back
      // as 0 * inf = NaN where no guard is compiled. One select a word and block, not a key.
      const bool past_end = j0 + LANE_IN_SUBGROUP >= j_end;
      [[unroll]] for (uint d = 0u; d < D4; ++d) mine[d] = past_end ? vec4(0.0) : load_v(mine_word + d);
      float weight[ROWS * KEY_BLOCK];
      [[unroll]] for (uint r = 0u; r < ROWS; ++r) [[unroll]] for (uint u = 0u; u < KEY_BLOCK; ++u) {
        weight[r * KEY_BLOCK + u] = key_weight(sc[r * KEY_BLOCK + u], m[r]);
        l[r] += weight[r * KEY_BLOCK + u];
      }
      [[unroll]] for (uint d = 0u; d < D4; ++d) [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
        vec4 a = acc[r * D4 + d];
        // GUARDED: a key masked for the row (weight exactly 0) adds nothing. A select of the value,
        // not a branch: the shuffle stays in uniform control flow.
        [[unroll]] for (uint u = 0u; u < KEY_BLOCK; ++u) {
          const float w = weight[r * KEY_BLOCK + u];
          const vec4 value = SHARED_LOAD(mine[d], u);
          a += w * (!GUARDED || w != 0.0 ? value : vec4(0.0));
        }
        acc[r * D4 + d] = a;
      }
    } else for (uint u = 0u; u < u_end; ++u) {
      vec4 value[D4];
      load_kv_row(key_word(kv_word, b, hk, j0 + u), true, value);
      [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
        const float p = key_weight(sc[r * KEY_BLOCK + u], m[r]);
        l[r] += p;
        // GUARDED: a key masked for the row (weight exactly 0) adds nothing.
        if (!GUARDED || p != 0.0) [[unroll]] for (uint d = 0u; d < D4; ++d) acc[r * D4 + d] += p * value[d];
      }
    }
    // Shaw's buckets take the block's weights after its values: the edges' sums, and near the
    // diagonal an interior bucket's row of rel_values (unrolled: no loop iterations to count).
    if (BIAS_MODE == RELPOS_ATTN_SHAW) [[unroll]] for (uint u = 0u; u < KEY_BLOCK; ++u) if (u < u_end) [[unroll]] for (uint r = 0u; r < ROWS; ++r) {
      const uint j = j0 + u;
      const float p = key_weight(sc[r * KEY_BLOCK + u], m[r]);  // the values' weight again (Shaw only)
      if (j >= M && p > 0.0) {
        const uint idx = uint(clamp(int(j) + rp_base[r], -kk, kk) + kk);
        if (idx == 0u) w_lo[r] += p;
        else if (idx == last_rel) w_hi[r] += p;
        else if (SHAW_LOCAL) rel_weight[r * SLOTS + idx - 1u] += p;
        else [[unroll]] for (uint d = 0u; d < D4; ++d) acc[r * D4 + d] += p * rel_values[idx * D4 + d];
      }
    }
