// The dense part of the model as L + 1 onnxruntime graphs ("stages"), one session.run each per
// chunk of tokens (ARCHITECTURE.md §3). Attention sits between stages, in the native pool:
//
//   stage 0       h                          → pre(0)                      → q, k, v
//   stage ℓ (1..L−1)  h, attn(ℓ−1)           → post(ℓ−1) ⨾ pre(ℓ)          → q, k, v, h_next
//   stage L       h, attn(L−1), rows         → post(L−1) ⨾ final norm ⨾ LM head on `rows` → logits
//
// pre(ℓ) = norm, q/k/v projections (+bias), RoPE at `pos`; post(ℓ) = output projection,
// residual, norm, MLP, residual. Fusing post(ℓ−1) with pre(ℓ) halves the runs per token.
// Shapes: h [1, T, d], attn and q [1, T, heads·headDim], k and v [1, T, kvHeads·headDim],
// pos int64 [1, T] = 0..T−1 (each token's row of the RoPE rows), rope_cos and rope_sin float32
// [T, rotaryDim/2] (the cos/sin of the chunk's absolute positions: ropeRows(stageRope(hyper), p0, T)),
// rows int64 [R] (indices into T), logits [1, R, vocab].
//
// The graphs themselves are the model family's (layers/llama-graph.ts, layers/opt-graph.ts): this
// module picks the family's builder (layers/families.ts) and re-exports what every stage shares
// (layers/stage-graph.ts).
import { familyOf } from './layers/families.ts';
import type { StageGraph, StageOptions } from './layers/stage-graph.ts';
import type { ModelWeights } from './weights.ts';

export { STAGE_INPUTS, stageRope, type StageGraph, type StageInput, type StageOptions } from './layers/stage-graph.ts';

/** Builds stage `s` (0..L) of the model `w` holds, with its family's graphs. */
export function buildStage(w: ModelWeights, s: number, opts: StageOptions): StageGraph {
  return familyOf(w.model.hyper).onnxStage(w, s, opts);
}
