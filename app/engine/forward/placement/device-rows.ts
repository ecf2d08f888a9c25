// Attention on a device over a row buffer (issue 14's offload mode; offload-attention.ts): per
// decode step and layer the rows to attend — every stored slot, or a policy's lists + the current
// token — are planned against the device-side buffer, only the misses are copied out of the pool,
// and attention runs in an onnxruntime graph. The bytes that crossed, the buffer's hits and misses
// and the attention time replace what the policy estimated. A prompt chunk attends in place.
import { attendCausal, type AttentionArgs, type KvPool } from '../../../../native/index.js';
import type { OffloadAttention, OffloadStepStats } from './offload-attention.ts';
import type { RowPolicy } from '../policy/row-policy.ts';
import type { StepTrace } from '../step-trace.ts';
import type { AttentionPlacement } from './attention-placement.ts';

/** the native attention calls' most threads (native LH_MAX_ATTENTION_THREADS) */
const MAX_ATTENTION_THREADS = 64;

export class DeviceRowsAttention implements AttentionPlacement {
  readonly readsLists = true;
  private readonly threads: number;

  constructor(
    private readonly pool: KvPool,
    private readonly heads: number,
    threads: number,
    readonly offload: OffloadAttention,
    /** [layer] the layer's arguments for the prompt's causal attention (the device graph runs the defaults) */
    private readonly args: readonly (AttentionArgs | undefined)[] = [],
  ) {
    this.threads = Math.min(threads, MAX_ATTENTION_THREADS);
  }

  get bufferBytes(): number {
    return this.offload.rows.byteLength;
  }

  appended(layer: number, first: number, count: number): void {
    this.offload.appended(layer, first, count);
  }

  attendPrompt(layer: number, q: Float32Array, _T: number, out: Float32Array): void {
    attendCausal(this.pool, layer, q, this.heads, out, this.threads, this.args[layer]);
  }

  async attendAll(layer: number, q: Float32Array, out: Float32Array): Promise<void> {
    await this.offload.attendAll(layer, q, out);
  }

  async attendSelected(layer: number, policy: RowPolicy, q: Float32Array, N: number, out: Float32Array): Promise<void> {
    await this.offload.attendSelected(layer, policy.select(layer, q, N), this.pool.lastSlot(layer), q, out);
  }

  figures(layer: number, trace: StepTrace, waitedMs: number): void {
    const mine = this.offload.lastLayer()!;
    trace.bytes[layer] = mine.crossedBytes;
    trace.hits[layer] = mine.hits;
    trace.misses[layer] = mine.misses;
    if (trace.dense[layer] === 0) {
      trace.waitMs[layer] = waitedMs;
      trace.attentionMs[layer] = mine.attentionMs;
    }
  }

  endStep(position: number): void {
    this.offload.endStep(position);
  }

  lastStep(): OffloadStepStats | undefined {
    return this.offload.lastStep();
  }

  clear(): void {
    this.offload.clear();
  }

  async dispose(): Promise<void> {
    await this.offload.dispose();
  }
}
