// The offload mode's attention (issue 14): per layer and decode step, the rows to attend (every
// stored slot for 'full' and dense layers; InfiniGen's selection + the current token for its sparse
// layers) are planned against the device-side row buffer (row-buffer.ts), only the misses are copied
// out of the native pool into it, and attention runs in an onnxruntime graph over the gathered rows
// (app/engine/onnx/attention-graph.ts). Prefill stays on the native in-place path (dense, causal).
//
// Two ways to update the buffer (rowUpdate):
//   'host'  (default on the CPU provider): the buffer is a pair of host arrays bound to every run; on the
//           CPU provider they are the provider's memory, so the native gather writes the misses into
//           them and nothing else moves. (On another provider onnxruntime would copy them every run.)
//   'graph' (default on other providers): the buffer lives in onnxruntime tensors on the provider's
//           device (WebGPU: preferredOutputLocation 'gpu-buffer'), sized for every slot; the misses are
//           staged and a ScatterND graph writes them in (attention-graph.ts RowUpdateSession); a layer's
//           first buffer is made on the device too (only its shape crosses). On the CPU it works too
//           (tests), at the cost of a copy of the layer's buffer per update.
// Bytes that cross per layer and step, counted from what is bound (not estimated): the misses' K and V
// rows (the native gather's own count) + every other host tensor bound to the runs (idx, or for rows
// that are each head's buffer prefix in order — 'full', dense layers — just their count n; 'graph': the
// rows to overwrite and a layer's first zero buffer's 16-byte shape; on a non-CPU provider also q, the
// output and, 'host', the buffer itself). offload-webgpu.test.ts holds WebGPU's figures to the CPU
// provider's, term by term.
// InfiniGen's speculation (partial keys, scores, selection) runs natively on the host, so no partial
// key crosses.
import type { KvPool } from '../../../../native/index.js';
import { AttentionSession, RowUpdateSession, type BoundTensor, type RowTensors } from '../../onnx/attention-graph.ts';
import type { ProviderName } from '../../onnx/session.ts';
import { RowBuffer, type RowBufferMode } from './row-buffer.ts';

export interface OffloadLayerStats {
  layer: number;
  /** rows per KV head attended (the current token included) */
  rows: number;
  hits: number;
  misses: number;
  /** K+V bytes of the misses written into the row buffer */
  uploadBytes: number;
  /** bytes of the host tensors bound to the run: idx; on a non-CPU provider also q, the row buffer and the output (onnxruntime copies them every run) */
  hostTensorBytes: number;
  /** uploadBytes + hostTensorBytes: what crossed to the device for this layer */
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
  /** initial buffer rows per KV head of each layer (default: the pool's capacity; 'graph': always the capacity) */
  initialRowsPerHead?: readonly number[];
  /** how misses reach the buffer (default 'host' on the CPU provider, 'graph' on others) */
  rowUpdate?: RowBufferMode;
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
  /** [kvHeads] this step's lists with the current slot (views of listScratch) */
  private listViews: Int32Array[] = [];
  /** rowUpdate 'graph': each layer's buffer as the update graph left it, and the rows to overwrite as int64 */
  private readonly device: (RowTensors | undefined)[];
  private destScratch = new BigInt64Array(0);

  private constructor(
    private readonly pool: KvPool,
    private readonly session: AttentionSession,
    q: Float32Array,
    out: Float32Array,
    rows: RowBuffer,
    private readonly update: RowUpdateSession | undefined,
  ) {
    this.q = q;
    this.out = out;
    this.rows = rows;
    this.device = new Array<RowTensors | undefined>(pool.layers).fill(undefined);
  }

  static async create(pool: KvPool, o: OffloadOptions): Promise<OffloadAttention> {
    const w = o.heads * pool.headDim;
    const q = new Float32Array(w);
    const out = new Float32Array(w);
    const mode = o.rowUpdate ?? ((o.providers ?? ['cpu']).every((p) => p === 'cpu') ? 'host' : 'graph');
    const everySlot = new Array<number>(pool.layers).fill(pool.capacityTokens);
    const rows = new RowBuffer(pool, mode === 'graph' ? everySlot : (o.initialRowsPerHead ?? everySlot), mode);
    // an arena: attention's intermediates (the gathered rows cast to fp32: tens of MiB at 16K) have the
    // same sizes from step to step; without one each run could map fresh pages and fault them in
    // (measured while the runner fixed glibc's mmap threshold at 1 MiB: 45 -> 23 ms per layer at
    // 16,384 rows x 4 KV heads)
    const sessionOpts = { intraOpThreads: o.threads, cpuMemArena: true, ...(o.providers ? { executionProviders: o.providers } : {}) };
    const session = await AttentionSession.create({ heads: o.heads, kvHeads: pool.kvHeads, headDim: pool.headDim, rowType: rows.rowType }, q, out, sessionOpts);
    let update: RowUpdateSession | undefined;
    try {
      if (mode === 'graph') update = await RowUpdateSession.create({ headDim: pool.headDim, rowType: rows.rowType }, sessionOpts);
    } catch (error) {
      await session.release();
      throw error;
    }
    return new OffloadAttention(pool, session, q, out, rows, update);
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

  /** Attention of `q` over selected[g] ∪ {current} per KV head g into `out` (the lists may differ in length). */
  async attendSelected(layer: number, selected: readonly Int32Array[], current: number, q: Float32Array, out: Float32Array): Promise<void> {
    let n = 0;
    for (const list of selected) n = Math.max(n, list.length + 1);
    for (let g = 0; g < selected.length; g++) {
      const m = selected[g]!.length + 1;
      let s = this.listScratch[g];
      if (!s || s.length < n) s = this.listScratch[g] = new Int32Array(Math.max(n, 2 * (s?.length ?? 0)));
      s.set(selected[g]!);
      s[m - 1] = current;
      this.listViews[g] = s.subarray(0, m);
    }
    await this.run(layer, n, this.listViews.slice(0, selected.length), q, out);
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
    for (const t of this.device) {
      if (t?.onDevice) {
        t.k.dispose();
        t.v.dispose();
      }
    }
    await this.update?.release();
    await this.session.release();
  }

  private async run(layer: number, n: number, lists: readonly Int32Array[] | undefined, q: Float32Array, out: Float32Array): Promise<void> {
    const t0 = performance.now();
    const plan = this.rows.step(layer, n, lists);
    let hostTensorBytes = 0;
    let rows: RowTensors;
    if (this.update) {
      let held = this.device[layer];
      if (!held) {
        const z = await this.update.zeros(this.pool.kvHeads * this.rows.rowsPerHead(layer));
        held = z.rows;
        for (const b of z.bound) if (!b.resident) hostTensorBytes += b.bytes;
      }
      rows = held;
      if (plan.misses > 0) {
        const m = plan.misses;
        if (this.destScratch.length < m) this.destScratch = new BigInt64Array(Math.max(m, 2 * this.destScratch.length));
        const dest = plan.staged!.dest;
        for (let i = 0; i < m; i++) this.destScratch[i] = BigInt(dest[i]!);
        const r = await this.update.run(rows, this.destScratch, m, plan.staged!.k, plan.staged!.v);
        rows = r.rows;
        // the staged rows are plan.uploadBytes; every other host tensor of the update counts here
        for (const b of r.bound) if (!b.resident && b.name !== 'k_new' && b.name !== 'v_new') hostTensorBytes += b.bytes;
      }
      this.device[layer] = rows;
    } else {
      rows = this.rows.bound(layer);
    }
    this.q.set(q);
    const bound: BoundTensor[] = await this.session.run(rows, plan.idx, n, plan.prefix, plan.lengths);
    out.set(this.out);
    for (const b of bound) if (!b.resident) hostTensorBytes += b.bytes;
    const crossedBytes = plan.uploadBytes + hostTensorBytes;
    this.boundBytesTotal += crossedBytes;
    this.runs += 1;
    this.current.push({ layer, rows: n, hits: plan.hits, misses: plan.misses, uploadBytes: plan.uploadBytes, hostTensorBytes, crossedBytes, attentionMs: performance.now() - t0 });
  }
}
