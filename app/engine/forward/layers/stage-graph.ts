// What every family's onnxruntime stage graphs share (graphs.ts draws the stages): the inputs a
// stage may take, what a built stage is, its name, the LM head, and the llama family's RoPE
// frequencies. The families' own graphs (llama-graph.ts, opt-graph.ts) build on these; graphs.ts
// re-exports them and picks the family's builder.
import type { ModelHyperparameters } from '../../model/types.ts';
import { GraphBuilder } from '../../onnx/graph-builder.ts';
import { linear, type RopeFrequencies } from '../../onnx/ops.ts';
import type { ModelWeights } from '../weights.ts';

/** Every input a stage graph may have (shapes: graphs.ts). */
/** (ple_tok, ple: Gemma 4's per-layer embeddings, gemma4-graph.ts; gate: a gated attention's output gate, qwen35-graph.ts) */
export const STAGE_INPUTS = ['h', 'attn', 'pos', 'rope_cos', 'rope_sin', 'spec_rope_cos', 'spec_rope_sin', 'rows', 'ple_tok', 'ple', 'gate'] as const;
export type StageInput = (typeof STAGE_INPUTS)[number];

export interface StageGraph {
  name: string;
  model: Uint8Array;
  /** Bytes of weights in the graph. */
  weightBytes: number;
  inputs: readonly StageInput[];
}

export interface StageOptions {
  /**
   * InfiniGen (llama family): stage s also outputs q_spec [1, T, heads·headDim] = RoPE(x_s·W_q^{(s+1)} + b),
   * layer s+1's query computed from layer s's normalised attention input (ARCHITECTURE.md §4.4).
   * The skew A[:, C] is applied natively (it is chosen per prompt, after the graphs are built).
   * Where layer s+1's RoPE differs from layer s's (Gemma 3's local and global θ), the stage also
   * takes spec_rope_cos/spec_rope_sin, layer s+1's rows.
   */
  speculateNext?: boolean;
}

/** A family's onnxruntime stage builder: stage `s` (0..L) of the model `w` holds. */
export type OnnxStageBuilder = (w: ModelWeights, s: number, opts: StageOptions) => StageGraph;

export const blk = (l: number, what: string): string => `blk.${l}.${what}`;

/** Stage s of L: 'stage0.pre0', 'stage{s}.post{s−1}.pre{s}', 'stage{L}.post{L−1}.head'. */
export function stageName(s: number, L: number): string {
  return s === 0 ? 'stage0.pre0' : s === L ? `stage${s}.post${s - 1}.head` : `stage${s}.post${s - 1}.pre${s}`;
}

/**
 * The RoPE of a llama-family model's stages (its cos/sin rows are fed per run: ropeRows, so the
 * graph takes only the layout and the rotated dimensions from it; LongRoPE's factors, which
 * depend on the session's context, are left to the runner's ropeFrequencies).
 */
export function stageRope(hyper: ModelHyperparameters): RopeFrequencies {
  const scaling = hyper.ropeScaling?.kind === 'longrope' ? undefined : hyper.ropeScaling;
  const rotaryDim = hyper.ropeDims !== undefined && hyper.ropeDims !== hyper.headDim ? { rotaryDim: hyper.ropeDims } : {};
  return { headDim: hyper.headDim, ...rotaryDim, theta: hyper.ropeTheta ?? 10000, layout: hyper.ropeLayout ?? 'neox', ...(scaling ? { scaling } : {}) };
}

export function stageDims(hyper: ModelHyperparameters): { d: number; qw: number; kvw: number } {
  return { d: hyper.hiddenSize, qw: hyper.heads * hyper.headDim, kvw: hyper.kvHeads * hyper.headDim };
}

/** What every family's stage s starts with: its dims, a builder named for the stage, the input h [1, T, d]. */
export function startStage(w: ModelWeights, s: number): { hyper: ModelHyperparameters; d: number; qw: number; kvw: number; L: number; eps: number; g: GraphBuilder; h: string; inputs: StageGraph['inputs'][number][] } {
  const hyper = w.model.hyper;
  const L = hyper.layers;
  const g = new GraphBuilder(stageName(s, L));
  const h = g.input('h', 'float32', [1, 'T', hyper.hiddenSize]);
  return { hyper, ...stageDims(hyper), L, eps: hyper.normEps, g, h, inputs: ['h'] };
}

export function finishStage(g: GraphBuilder, inputs: StageGraph['inputs']): StageGraph {
  return { name: g.name, model: g.toModel(), weightBytes: g.weightBytes, inputs };
}

/** LM head on the chosen rows of an already normed [1, T, d]. */
export function lmHead(g: GraphBuilder, w: ModelWeights, normed: string, vocab: number): void {
  const rows = g.input('rows', 'int64', ['R']);
  const picked = g.op('Gather', [normed, rows], { axis: 1 }, { name: 'pick_rows' });
  const head = linear(g, picked, w.linear(w.has('output.weight') ? 'output.weight' : 'token_embd.weight'), 'lm_head');
  g.rename(head, 'logits');
  g.output('logits', 'float32', [1, 'R', vocab]);
}
