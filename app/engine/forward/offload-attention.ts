// The offload mode's attention (issue 14): per layer and decode step, the rows to attend (every
// stored slot for 'full' and dense layers; InfiniGen's selection + the current token for its sparse
// layers) are planned against the device-side row buffer (row-buffer.ts), only the misses are copied
// out of the native pool into it, and attention runs in an onnxruntime graph over the gathered rows
// (app/engine/onnx/attention-graph.ts). Prefill stays on the native in-place path (dense, causal).
//
// Bytes that cross per layer and step, counted from what is bound (not estimated): the misses' K and V
// rows written into the buffer (the native gather's own count) + the idx tensor given to the run. q
// and the output stay with the dense graphs on the same provider; the buffer itself is resident.
// InfiniGen's speculation (partial keys, scores, selection) runs natively on the host, so no partial
// key crosses.
import type { KvPool } from '../../../native/index.js';
import { AttentionSession, type BoundTensor } from '../onnx/attention-graph.ts';
import type { ProviderName } from '../onnx/session.ts';
import { RowBuffer } from './row-buffer.ts';

export interface OffloadLayerStats {
  layer: number;
  /** rows per KV head attended (the current token included) */
  rows: number;
  hits: number;
  misses: number;
  /** K+V bytes of the misses written into the row buffer */
  uploadBytes: number;
  /** bytes of the other host tensors bound to the run (idx) */
  indexBytes: number;
  /** uploadBytes + indexBytes: what crossed to the device for this layer */
  crossedBytes: number;
  attentionMs: number;
}

export interface OffloadStepStats {
  position: number;
  layers: OffloadLayerStats[];
  crossedBytes: number;
  hits: number;
  misses: number;
}

export interface OffloadOptions {
  heads: number;
  threads: number;
  providers?: readonly ProviderName[];
  /** initial buffer rows per KV head of each layer (default: the pool's capacity) */
  initialRowsPerHead?: readonly number[];
}

export class OffloadAttention {
  /** the query bound to every run (copied in), and the output every run writes */
  readonly q: Float32Array;
  readonly out: Float32Array;
  readonly rows: RowBuffer;
  /** since creation: bytes bound from the host (uploads + non-resident tensors), and runs */
  boundBytesTotal = 0;
  runs = 0;
  private current: OffloadLayerStats[] = [];
  private last: OffloadStepStats | undefined;
  private listScratch: Int32Array[] = [];

  private constructor(
    private readonly pool: KvPool,
    private readonly session: AttentionSession,
    q: Float32Array,
    out: Float32Array,
    rows: RowBuffer,
  ) {
    this.q = q;
    this.out = out;
    this.rows = rows;
  }

  static async create(pool: KvPool, o: OffloadOptions): Promise<OffloadAttention> {
    const w = o.heads * pool.headDim;
    const q = new Float32Array(w);
    const out = new Float32Array(w);
    const rows = new RowBuffer(pool, o.initialRowsPerHead ?? new Array<number>(pool.layers).fill(pool.capacityTokens));
    const session = await AttentionSession.create({ heads: o.heads, kvHeads: pool.kvHeads, headDim: pool.headDim, rowType: rows.rowType }, q, out, {
      intraOpThreads: o.threads,
      ...(o.providers ? { executionProviders: o.providers } : {}),
    });
    return new OffloadAttention(pool, session, q, out, rows);
  }

  /** The pool appended into slots first..first+count−1 of `layer`. */
  appended(layer: number, first: number, count: number): void {
    this.rows.invalidate(layer, first, count);
  }

  /** The pool no longer holds what the buffer mirrors (reset, truncate, import, rollback). */
  clear(): void {
    this.rows.clear();
    this.current = [];
    this.last = undefined;
  }

  /** Attention of `q` over every stored slot of `layer` into `out`. */
  async attendAll(layer: number, q: Float32Array, out: Float32Array): Promise<void> {
    await this.run(layer, this.pool.length(layer), undefined, q, out);
  }

  /** Attention of `q` over selected[g] ∪ {current} per KV head g (every list of the same length) into `out`. */
  async attendSelected(layer: number, selected: readonly Int32Array[], current: number, q: Float32Array, out: Float32Array): Promise<void> {
    const n = selected[0]!.length + 1;
    for (let g = 0; g < selected.length; g++) {
      let s = this.listScratch[g];
      if (!s || s.length < n) s = this.listScratch[g] = new Int32Array(Math.max(n, 2 * (s?.length ?? 0)));
      if (selected[g]!.length !== n - 1) throw new RangeError(`offload: KV head ${g} selected ${selected[g]!.length} rows, head 0 ${n - 1}`);
      s.set(selected[g]!);
      s[n - 1] = current;
    }
    await this.run(layer, n, this.listScratch.slice(0, selected.length).map((s) => s.subarray(0, n)), q, out);
  }

  /** Closes a decode step's figures (call after its last layer). */
  endStep(position: number): OffloadStepStats {
    const layers = this.current;
    this.current = [];
    let crossedBytes = 0;
    let hits = 0;
    let misses = 0;
    for (const l of layers) {
      crossedBytes += l.crossedBytes;
      hits += l.hits;
      misses += l.misses;
    }
    this.last = { position, layers, crossedBytes, hits, misses };
    return this.last;
  }

  /** The figures of the latest layer run in the current step. */
  lastLayer(): OffloadLayerStats | undefined {
    return this.current[this.current.length - 1];
  }

  lastStep(): OffloadStepStats | undefined {
    return this.last;
  }

  async dispose(): Promise<void> {
    await this.session.release();
  }

  private async run(layer: number, n: number, lists: readonly Int32Array[] | undefined, q: Float32Array, out: Float32Array): Promise<void> {
    const t0 = performance.now();
    const plan = this.rows.step(layer, n, lists);
    this.q.set(q);
    const bound: BoundTensor[] = await this.session.run(this.rows.bound(layer), plan.idx, n);
    out.set(this.out);
    let indexBytes = 0;
    for (const b of bound) if (!b.resident) indexBytes += b.bytes;
    const crossedBytes = plan.uploadBytes + indexBytes;
    this.boundBytesTotal += crossedBytes;
    this.runs += 1;
    this.current.push({ layer, rows: n, hits: plan.hits, misses: plan.misses, uploadBytes: plan.uploadBytes, indexBytes, crossedBytes, attentionMs: performance.now() - t0 });
  }
}
