// One chunk of tokens through every layer (ARCHITECTURE.md §3). The loop names no policy, no
// placement and no model family: each layer's row policy says which rows it attends, the placement
// says where attention runs, the step trace takes the figures.
//
//   ids ─► embedding rows ─► stage 0 ─► for each layer ℓ:
//     a linear-attention layer (no KV rows): the recurrence advances the sequence's state over the
//                           chunk (linear-attention.ts) and its output is the next stage's attn; else
//     q, k, v (and q̃ of layer ℓ+1 when its policy speculates) from stage ℓ
//     sequence.observe      the policy's sequence state sees the chunk's rows (InfiniGen's energies)
//     policy.prefetch(ℓ+1)  a sparse decode step: layer ℓ+1's selection may start from q̃
//     pool.append(ℓ)        k, v of the chunk
//     attention             a prompt chunk: causal, in place; a decode step: every row, or the rows
//                           the layer's policy selects + the current token, where the placement runs it
//     policy.attended       bookkeeping (H2O's mass)
//     trace                 the layer's figures (policy, then placement)
//   ─► stage ℓ+1 (with a gated attention's gate beside attn) (post(ℓ) fused with pre(ℓ+1); the last one ends in the LM head)
//
// Nothing here allocates per layer in native code; JS allocates the small per-chunk arrays
// onnxruntime or the native stages hand back, and a prompt chunk's attention output.
import type { KvPool } from '../../../native/index.js';
import type { StepProbe } from '../metrics/step-probe.ts';
import { ropeRows, type RopeFrequencies } from '../onnx/ops.ts';
import type { TensorData } from '../onnx/graph-builder.ts';
import { DeviceTensor, type StageValue } from '../onnx/session.ts';
import type { EmbeddingTable } from './embedding.ts';
import { ForwardAbortedError } from './errors.ts';
import type { StageGraph } from './graphs.ts';
import type { StageRunner } from './native-stages.ts';
import type { AttentionPlacement } from './placement/attention-placement.ts';
import type { LinearAttentionState } from './linear-attention.ts';
import type { ChunkObserver, RowPolicy } from './policy/row-policy.ts';
import { StepTrace } from './step-trace.ts';

/** Milliseconds spent per part of the forward pass since the last resetTimings(). */
export interface ForwardTimings {
  embedding: number;
  /** stage 0 and the fused post/pre stages */
  layerGraphs: number;
  /** the last stage: post(L−1), final norm, LM head */
  headGraph: number;
  append: number;
  attention: number;
  /** whole calls minus the parts above: feeds, checks, awaits */
  other: number;
  total: number;
  tokens: number;
  calls: number;
}

export function emptyTimings(): ForwardTimings {
  return { embedding: 0, layerGraphs: 0, headGraph: 0, append: 0, attention: 0, other: 0, total: 0, tokens: 0, calls: 0 };
}

/** How a chunk's tokens enter the first stage: token rows, learned positions (OPT), a scale, RoPE (llama). */
export interface ChunkInput {
  tokens: EmbeddingTable;
  /** learned position rows (OPT), read at position + positionOffset */
  positions: EmbeddingTable | undefined;
  positionOffset: number;
  /** multiplies every embedded row (Gemma: √d); 1: the rows are the table's bits */
  scale: number;
  /** per-layer token rows [vocab, L·P] fed to stage 0 as ple_tok (EmbeddingSpec.perLayerTable), or none */
  perLayerTokens?: EmbeddingTable;
  /**
   * [layer] the RoPE of each layer's q and k (cos/sin rows per chunk), or none. Layers may differ
   * (Gemma 3's local and global θ, Gemma 4's proportional RoPE on global layers): stage s takes layer s's rows as rope_cos/rope_sin and layer
   * s+1's as spec_rope_cos/spec_rope_sin (its speculative query; the stage asks for them only
   * when they differ).
   */
  ropes: readonly (RopeFrequencies | undefined)[];
}

/** The fixed parts of a runner the loop walks. */
export interface StepParts {
  pool: KvPool;
  stages: readonly StageRunner[];
  graphs: readonly StageGraph[];
  input: ChunkInput;
  layers: number;
  /** query heads (every layer's) */
  heads: number;
  /** hidden size */
  d: number;
  /** [layer] elements per head of layer ℓ's q, k and v (Gemma 4: window and global layers differ) */
  headDims: readonly number[];
  /** [layer] false where the layer reads an earlier layer's K/V (LayerSpec kvSource): nothing is appended for it */
  ownsKv: readonly boolean[];
  /** [layer] K+V bytes of one token of the rows layer ℓ reads, every KV head (what a dense layer fetches per past token) */
  tokenRowBytes: readonly number[];
  /** [layer] true for a linear-attention layer: no rows, its state advances instead */
  linear: readonly boolean[];
  /** [layer] the width of the mixer's output per token, what stage ℓ+1 takes as attn (heads·headDim(ℓ); a linear layer's value heads·head size) */
  attnWidths: readonly number[];
  /** the linear-attention layers' state (undefined: the model has none) */
  recurrent: LinearAttentionState | undefined;
}

export interface ChunkOptions {
  /** logits of the last row, of every row, or none (a prompt chunk before the last) */
  rows: 'last' | 'all' | 'none';
  /** a prompt chunk: dense under every policy, even one of a single token */
  prompt: boolean;
  /** a run that is not the sequence's (the self-generated calibration): dense, in place, not observed */
  detached: boolean;
  signal: AbortSignal | undefined;
}

export class StepLoop {
  /** [layer] the row policy of each layer (the plan, built once at load and on a policy switch) */
  plan: RowPolicy[];
  /** the distinct policies of the plan */
  private policies: RowPolicy[];
  /** where decode steps attend (a prompt chunk and a detached run attend in place through attendPrompt) */
  placement: AttentionPlacement;
  /** the sequence state fed with every chunk (a policy's, kept across switches by the runner) */
  sequence: ChunkObserver | undefined;
  probe: StepProbe | undefined;
  readonly trace: StepTrace;
  t: ForwardTimings = emptyTimings();
  /** [heads·max headDim] a decode step's attention output, reused (a layer uses its first heads·headDim(ℓ)) */
  private readonly attnOne: Float32Array;
  /** [d] scratch of the position rows */
  private readonly scratch: Float32Array;
  /** [layers] evictions seen at the end of the previous step (for the per-step figure) */
  private evictedBefore: number[];
  /** [layer] which distinct RoPE the layer has (−1: none) */
  private readonly ropeKey: readonly number[];

  constructor(
    private readonly parts: StepParts,
    plan: RowPolicy[],
    placement: AttentionPlacement,
  ) {
    this.plan = plan;
    this.policies = [...new Set(plan)];
    this.placement = placement;
    this.trace = new StepTrace(parts.layers);
    this.attnOne = new Float32Array(Math.max(...parts.attnWidths));
    this.scratch = new Float32Array(parts.d);
    this.evictedBefore = new Array<number>(parts.layers).fill(0);
    // layers with the same RoPE share one key (and one set of cos/sin rows per chunk); −1: none
    const keys = new Map<string, number>();
    this.ropeKey = parts.input.ropes.map((r) => {
      if (r === undefined) return -1;
      const text = JSON.stringify(r);
      if (!keys.has(text)) keys.set(text, keys.size);
      return keys.get(text)!;
    });
  }

  /** A new plan (a policy switch); the latest step's figures end with it. */
  setPlan(plan: RowPolicy[]): void {
    this.plan = plan;
    this.policies = [...new Set(plan)];
    this.trace.sparse = false;
  }

  /** The distinct policies of the plan. */
  get distinctPolicies(): readonly RowPolicy[] {
    return this.policies;
  }

  /** The pool's eviction counts start again (it was reset). */
  forgetEvictions(): void {
    this.evictedBefore.fill(0);
  }

  /** Evictions per layer since the pool was last reset (all 0 without a budget). */
  evictions(): number[] {
    const { pool, layers } = this.parts;
    if (!pool.evicting) return new Array<number>(layers).fill(0);
    return Array.from({ length: layers }, (_, l) => pool.evictions(l));
  }

  /** One chunk at position p0 through every layer; returns the logits of 'last' / 'all' rows, or nothing. */
  async run(ids: readonly number[], p0: number, o: ChunkOptions): Promise<Float32Array | undefined> {
    const { pool, layers, heads, ownsKv, linear, attnWidths } = this.parts;
    const t0 = performance.now();
    const T = ids.length;
    const h = this.embed(ids, p0); // [T, d]
    const t1 = performance.now();
    this.t.embedding += t1 - t0;

    // RoPE: the cos/sin rows of positions p0..p0+T−1, read by the graphs at rows 0..T−1 (graphs.ts)
    const pos: TensorData = { elemType: 'int64', dims: [1, T], data: BigInt64Array.from({ length: T }, (_, i) => BigInt(i)) };
    const ropeRowsOf = this.ropeFeeds(p0, T);
    const hT = f32([1, T, this.parts.d], h);
    const perLayer = this.parts.input.perLayerTokens;
    let out = await this.runStage(0, { h: hT, pos, ...ropeRowsOf(0), ...(perLayer ? { ple_tok: f32([1, T, perLayer.width], this.rows(perLayer, ids)) } : {}) });
    // per-layer inputs [T, L·P] from stage 0; stage ℓ+1 takes layer ℓ's [T, P]
    const ple = perLayer ? (out.ple!.data as Float32Array) : undefined;
    let residual: StageValue = hT;
    let logits: Float32Array | undefined;

    const decoding = T === 1 && !o.prompt && !o.detached;
    const sparse = decoding && this.policies.some((p) => p.sparseStep());
    const sequence = this.sequence;
    if (sequence && o.prompt) sequence.startChunk(p0, T);
    const probe = decoding ? this.probe : undefined;
    const measure = sparse && probe?.armed === true;
    const placement = this.placement;
    if (decoding) this.trace.begin(p0, sparse);
    const recurrent = this.parts.recurrent;
    if (recurrent && !o.detached) recurrent.beginChunk(p0);
    // the hidden state between layer graphs: on WebGPU a device tensor (keepOnDevice h_next), released
    // once the next stage has read it, or here when the chunk ends early (an abort, rows none, an error)
    try {
      for (let l = 0; l < layers; l++) {
        if (o.signal) {
          // session.run may finish without giving timers a turn: let an abort be delivered
          await yieldToEventLoop();
          if (o.signal.aborted) throw new ForwardAbortedError(p0, { cause: o.signal.reason });
        }
        if (l > 0) {
          releaseIfOnDevice(residual); // read by this layer's stage already
          residual = out.h_next!;
        }
        const qw = attnWidths[l]!;
        const attn = T === 1 ? this.attnOne.subarray(0, qw) : new Float32Array(T * qw); // [T, attnWidths(ℓ)]
        let a = performance.now();
        if (linear[l]) {
          // no rows, no policy: the layer's state takes the chunk (the trace keeps its zeros); the
          // attention layer after it may select from this layer's input (InfiniGen's q̃)
          const qSpec = sparse ? (out.q_spec?.data as Float32Array | undefined) : undefined;
          if (qSpec && l + 1 < layers) this.plan[l + 1]!.prefetch?.(l + 1, qSpec);
          recurrent!.run(l, out, T, attn);
          this.t.attention += performance.now() - a;
        } else {
          const q = out.q!.data as Float32Array;
          // a KV-shared layer's stage outputs no k and v (ownsKv[ℓ] false)
          const k = out.k?.data as Float32Array | undefined;
          const v = out.v?.data as Float32Array | undefined;
          if (k !== undefined) sequence?.observe(l, q, k, T);
          const policy = this.plan[l]!;
          const selects = sparse && policy.selects(l);
          // a placement that reads lists waits for layer ℓ's selection now, before layer ℓ+1's job is
          // queued: then it waits for that one job only
          const waitedMs = selects && placement.readsLists ? (policy.settle?.(l) ?? 0) : 0;
          if (sparse) {
            // layer ℓ+1's selection starts now and runs while the rest of layer ℓ does
            const qSpec = out.q_spec?.data as Float32Array | undefined;
            if (qSpec && l + 1 < layers) this.plan[l + 1]!.prefetch?.(l + 1, qSpec);
            // no layer before layer 0 to speculate from: it selects with its own query
            if (l === 0) policy.prefetch?.(0, q);
          }
          a = performance.now();
          // a KV-shared layer computes no k/v: it attends the rows its source appended earlier in this chunk
          if (ownsKv[l]) {
            if (k === undefined || v === undefined) throw new Error(`stage ${l} output no k/v for a layer that keeps its own rows`);
            const slot = pool.appendBatch(l, k, v, p0);
            placement.appended(l, slot, T);
            if (probe && pool.evicting) probe.evicted(l, pool.lastEvicted(l));
          }
          const b = performance.now();
          this.t.append += b - a;

          if (!decoding) {
            placement.attendPrompt(l, q, T, attn);
            if (o.prompt) policy.observePrompt?.(l, q, p0, T);
          } else if (selects) {
            this.trace.sparseLayer(l);
            await placement.attendSelected(l, policy, q, p0, attn);
            policy.attended?.(l, q, p0);
            policy.figures(l, p0, this.trace);
            placement.figures(l, this.trace, waitedMs);
            if (measure) probe!.measure(pool, l, q, heads, policy.selection(l));
          } else {
            await placement.attendAll(l, q, attn);
            this.trace.denseLayer(l, p0, this.parts.tokenRowBytes[l]!);
            placement.figures(l, this.trace, 0);
          }
          this.t.attention += performance.now() - b;
        }

        const feeds: Record<string, StageValue> = { h: residual, attn: f32([1, T, qw], attn) };
        // a gated attention (Qwen3.5's full-attention layers) multiplies its output by σ(gate) in the next stage
        if (out.gate) feeds.gate = out.gate;
        const last = l === layers - 1;
        if (!last) Object.assign(feeds, { pos, ...ropeRowsOf(l + 1) });
        else if (o.rows === 'none') break;
        else feeds.rows = { elemType: 'int64', dims: [o.rows === 'all' ? T : 1], data: o.rows === 'all' ? BigInt64Array.from({ length: T }, (_, i) => BigInt(i)) : BigInt64Array.of(BigInt(T - 1)) };
        if (ple) {
          const P = ple.length / (T * layers);
          const slice = new Float32Array(T * P); // [T, P]: layer ℓ's per-layer input of each token
          for (let t = 0; t < T; t++) slice.set(ple.subarray((t * layers + l) * P, (t * layers + l + 1) * P), t * P);
          feeds.ple = f32([1, T, P], slice);
        }
        out = await this.runStage(l + 1, feeds);
        if (last) logits = out.logits!.data as Float32Array;
      }
    } finally {
      releaseIfOnDevice(residual);
      releaseIfOnDevice(out.h_next);
    }
    // rows === 'none' skipped the head, but layer L−1's K/V are appended: the cache is complete.
    if (recurrent && !o.detached) recurrent.endChunk(T);
    if (decoding) placement.endStep(p0);
    sequence?.commitChunk();
    if (pool.evicting) {
      const perLayer = this.evictions();
      if (sparse) {
        let step = 0;
        for (let l = 0; l < layers; l++) step += perLayer[l]! - this.evictedBefore[l]!;
        this.trace.evictions = { total: perLayer.reduce((x, y) => x + y, 0), step, perLayer };
      }
      this.evictedBefore = perLayer;
    }
    probe?.stepDone();
    const total = performance.now() - t0;
    const t = this.t;
    t.total += total;
    t.tokens += T;
    t.calls += 1;
    t.other = t.total - t.embedding - t.layerGraphs - t.headGraph - t.append - t.attention;
    return logits;
  }

  /** [T, d] the chunk's token rows, with learned position rows added where the family has them. */
  /** The rows of `table` for ids, [T, width]. */
  private rows(table: EmbeddingTable, ids: readonly number[]): Float32Array {
    const out = new Float32Array(ids.length * table.width);
    for (let i = 0; i < ids.length; i++) table.readRow(ids[i]!, out, i * table.width);
    return out;
  }

  private embed(ids: readonly number[], p0: number): Float32Array {
    const { d, input } = this.parts;
    const h = new Float32Array(ids.length * d);
    for (let i = 0; i < ids.length; i++) {
      input.tokens.readRow(ids[i]!, h, i * d);
      if (input.positions) input.positions.addRow(p0 + i + input.positionOffset, h, i * d, this.scratch);
    }
    if (input.scale !== 1) for (let i = 0; i < h.length; i++) h[i]! *= input.scale;
    return h;
  }

  /**
   * The RoPE feeds of stage s for a chunk at p0 of T tokens: layer s's rows, and layer s+1's as
   * spec_rope_*; each distinct RoPE's rows are computed once per chunk.
   */
  private ropeFeeds(p0: number, T: number): (s: number) => Record<string, TensorData> {
    const { ropes } = this.parts.input;
    const computed = new Map<number, { cos: TensorData; sin: TensorData }>();
    const rowsOf = (layer: number): { cos: TensorData; sin: TensorData } | undefined => {
      const key = this.ropeKey[layer];
      if (key === undefined || key < 0) return undefined;
      let rows = computed.get(key);
      if (!rows) {
        const { cos, sin } = ropeRows(ropes[layer]!, p0, T);
        computed.set(key, (rows = { cos: f32([T, cos.length / T], cos), sin: f32([T, sin.length / T], sin) }));
      }
      return rows;
    };
    return (s) => {
      const own = rowsOf(s);
      const next = rowsOf(s + 1);
      return {
        ...(own ? { rope_cos: own.cos, rope_sin: own.sin } : {}),
        ...(next ? { spec_rope_cos: next.cos, spec_rope_sin: next.sin } : {}),
      };
    };
  }

  private async runStage(s: number, feeds: Record<string, StageValue>): Promise<Record<string, StageValue>> {
    const a = performance.now();
    const wanted = this.parts.graphs[s]!.inputs;
    const f: Record<string, StageValue> = {};
    for (const name of wanted) f[name] = feeds[name]!;
    this.trace.stageStartNs[s] = Number(process.hrtime.bigint());
    const out = await this.parts.stages[s]!.run(f);
    this.trace.stageEndNs[s] = Number(process.hrtime.bigint());
    const ms = performance.now() - a;
    if (s === this.parts.layers) this.t.headGraph += ms;
    else this.t.layerGraphs += ms;
    return out;
  }
}

const f32 = (dims: number[], data: Float32Array): TensorData => ({ elemType: 'float32', dims, data });

/** Frees a hidden state kept on the device (disposing twice is harmless); host arrays are left to the GC. */
function releaseIfOnDevice(v: StageValue | undefined): void {
  if (v instanceof DeviceTensor) v.dispose();
}

function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}
