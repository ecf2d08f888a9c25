// The server's Prometheus exposition (text format 0.0.4). Only figures we can compute or that
// the engine measured are exposed: the KV figures of the last step come from the engine's
// metric events (ARCHITECTURE.md §7) and are absent until a generation has sent one.
import type { ModelInfo, StepMetrics, StopReason } from '../common/protocol.ts';

/**
 * Bytes of the KV pool the engine allocates for this load: K and V rows for every layer, KV
 * head and position of the context window, at the KV type's width (fp16 2 bytes, fp32 4, int8 1
 * plus a 4-byte scale per row).
 * layers · kvHeads · (headDim · bytesPerValue + scale) · 2 (K and V) · contextLength.
 */
export function kvPoolBytes(model: Pick<ModelInfo, 'layers' | 'kvHeads' | 'headDim' | 'kvType' | 'contextLength' | 'kvLayers' | 'ringCheckpointBytes'>): number {
  // sliding-window layers keep rings: the engine reported each layer's pool bytes
  if (model.kvLayers) return model.kvLayers.reduce((a, l) => a + l.bytes, 0) + (model.ringCheckpointBytes ?? 0);
  const bytesPerValue = model.kvType === 'fp32' ? 4 : model.kvType === 'int8' ? 1 : 2;
  const rowBytes = model.headDim * bytesPerValue + (model.kvType === 'int8' ? 4 : 0);
  return model.layers * model.kvHeads * rowBytes * 2 * model.contextLength;
}

export interface GenerationFigures {
  stopReason: StopReason;
  promptTokens: number;
  completionTokens: number;
  ttftMs: number;
  decodeTokensPerS: number;
  prefillTokensPerS: number;
}

export class ServerMetrics {
  private readonly requests = new Map<string, number>();
  private readonly generations = new Map<StopReason, number>();
  private tokensGenerated = 0;
  private promptTokens = 0;
  private last: GenerationFigures | undefined;
  private lastStep: StepMetrics | undefined;

  constructor(
    private readonly state: () => { model: ModelInfo | undefined; queueWaiting: number; generating: boolean },
  ) {}

  countRequest(endpoint: string, status: number): void {
    const key = `${endpoint}\u0000${status}`;
    this.requests.set(key, (this.requests.get(key) ?? 0) + 1);
  }

  countGeneration(figures: GenerationFigures): void {
    this.generations.set(figures.stopReason, (this.generations.get(figures.stopReason) ?? 0) + 1);
    this.tokensGenerated += figures.completionTokens;
    this.promptTokens += figures.promptTokens;
    // Rates and latencies of a generation that made no token would read as 0: keep the last real one.
    if (figures.completionTokens > 0) this.last = figures;
  }

  /** The engine's latest metric event (sampled during a generation, and one at its end). */
  observeStep(step: StepMetrics): void {
    this.lastStep = step;
  }

  render(): string {
    const { model, queueWaiting, generating } = this.state();
    const out: string[] = [];
    const metric = (name: string, type: 'counter' | 'gauge', help: string, samples: [labels: string, value: number][]) => {
      out.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
      for (const [labels, value] of samples) out.push(`${name}${labels} ${formatNumber(value)}`);
    };
    metric(
      'longhand_requests_total',
      'counter',
      'HTTP requests answered, by endpoint and status (499: the client went away first).',
      [...this.requests].map(([key, count]) => {
        const [endpoint, status] = key.split('\u0000');
        return [`{endpoint="${escapeLabel(endpoint!)}",status="${status}"}`, count];
      }),
    );
    metric('longhand_generations_total', 'counter', 'Generations finished, by stop reason.', [...this.generations].map(([reason, count]) => [`{stop_reason="${reason}"}`, count]));
    metric('longhand_tokens_generated_total', 'counter', 'Completion tokens generated.', [['', this.tokensGenerated]]);
    metric('longhand_prompt_tokens_total', 'counter', 'Prompt tokens processed (prefill).', [['', this.promptTokens]]);
    if (this.last) {
      metric('longhand_decode_tokens_per_second', 'gauge', 'Decode speed of the last generation that made tokens.', [['', this.last.decodeTokensPerS]]);
      metric('longhand_prefill_tokens_per_second', 'gauge', 'Prefill speed of the last generation that made tokens.', [['', this.last.prefillTokensPerS]]);
      metric('longhand_ttft_seconds', 'gauge', 'Time to first token of the last generation that made tokens.', [['', this.last.ttftMs / 1000]]);
    }
    metric('longhand_queue_depth', 'gauge', 'Requests waiting for the engine (the running one not included).', [['', queueWaiting]]);
    metric('longhand_generating', 'gauge', '1 while a generation runs.', [['', generating ? 1 : 0]]);
    metric('longhand_model_loaded', 'gauge', '1 when a model is loaded.', [['', model ? 1 : 0]]);
    if (model) {
      metric('longhand_context_length', 'gauge', 'Context window of the loaded model, in tokens.', [['', model.contextLength]]);
      metric(
        'longhand_kv_pool_bytes',
        'gauge',
        'Size of the KV pool allocated for the context window: layers*kvHeads*headDim*2*bytes(kvType)*contextLength.',
        [[`{kv_type="${model.kvType}"}`, kvPoolBytes(model)]],
      );
      const kinds = model.kvLayers;
      if (kinds) {
        const bytes = (kind: string): number => kinds.filter((l) => l.kind === kind).reduce((a, l) => a + l.bytes, 0);
        metric('longhand_kv_pool_layer_bytes', 'gauge', 'KV pool bytes by layer kind: window layers keep rings (their checkpoints counted apart), global layers every token, linear-attention layers a recurrent state.', [
          ['{layer_kind="window"}', bytes('window')],
          ['{layer_kind="global"}', bytes('global')],
          ['{layer_kind="window_checkpoints"}', model.ringCheckpointBytes ?? 0],
          ['{layer_kind="linear"}', bytes('linear')],
        ]);
        metric('longhand_kv_layers', 'gauge', 'Layers with KV (window, global) and linear-attention layers (a state, no KV), by kind.', [
          ['{layer_kind="window"}', kinds.filter((l) => l.kind === 'window').length],
          ['{layer_kind="global"}', kinds.filter((l) => l.kind === 'global').length],
          ['{layer_kind="linear"}', kinds.filter((l) => l.kind === 'linear').length],
        ]);
      }
    }
    const step = this.lastStep;
    if (step) {
      const policy = `{policy="${escapeLabel(step.policy)}"}`;
      metric('longhand_kv_fetch_ratio', 'gauge', 'Mean over layers of selected/candidate tokens, at the last step the engine reported.', [[policy, step.fetchRatio]]);
      metric('longhand_kv_bytes_moved_per_token', 'gauge', 'K/V bytes moved to the compute device per token (counted on CPU too), last reported step.', [[policy, step.bytesMovedPerToken]]);
      if (step.expertBytesPerToken !== undefined) metric('longhand_expert_bytes_per_token', 'gauge', 'Mixture-of-experts models: expert weight bytes read per token (router and routed experts), last reported step.', [['', step.expertBytesPerToken]]);
      if (step.reuseHitRate !== null) metric('longhand_kv_reuse_hit_rate', 'gauge', 'Share of selected rows already staged on the device (reuse cache), last reported step.', [[policy, step.reuseHitRate]]);
      if (step.recall !== null) metric('longhand_kv_attention_recall', 'gauge', 'Share of the true softmax mass the selection covered (inspection on), last reported step.', [[policy, step.recall]]);
      metric('longhand_kv_evictions', 'gauge', 'Evictions the engine reported in its last metric event.', [[policy, step.evictions]]);
      metric('longhand_kv_context_tokens', 'gauge', 'Tokens in the cache at the last reported step.', [['', step.contextTokens]]);
      metric('longhand_kv_used_bytes', 'gauge', 'K/V bytes in use in the pool at the last reported step.', [['', step.memory.kvUsedBytes]]);
      const byKind = step.memory.kvByKind;
      if (byKind) {
        metric('longhand_kv_used_layer_bytes', 'gauge', 'K/V bytes in use by layer kind at the last reported step (window: the rings; window_checkpoints: their checkpoints).', [
          ['{layer_kind="window"}', byKind.window],
          ['{layer_kind="global"}', byKind.global],
          ['{layer_kind="window_checkpoints"}', byKind.checkpoints],
        ]);
      }
      const recurrent = step.memory.recurrent;
      if (recurrent) metric('longhand_recurrent_state_bytes', 'gauge', 'Hybrid models: bytes of the linear-attention layers\' recurrent state (with its rollback copy) and of its checkpoints, beside the pool.', [['{part="state"}', recurrent.stateBytes], ['{part="checkpoints"}', recurrent.checkpointBytes]]);
      metric('longhand_kv_pool_budget_bytes', 'gauge', 'The pool budget the engine reported.', [['', step.memory.poolBudgetBytes]]);
      metric('longhand_kv_partial_key_bytes', 'gauge', 'Bytes of the partial key rows (speculation) the engine reported.', [['', step.memory.partialKeyBytes]]);
      metric('longhand_weights_bytes', 'gauge', 'Model weight bytes the engine reported.', [['', step.memory.weightsBytes]]);
      metric('longhand_engine_rss_bytes', 'gauge', 'Resident memory of the engine process, as it reported.', [['', step.memory.rssBytes]]);
    }
    return `${out.join('\n')}\n`;
  }
}

function formatNumber(value: number): string {
  if (Number.isNaN(value)) return 'NaN';
  if (!Number.isFinite(value)) return value > 0 ? '+Inf' : '-Inf';
  return String(value);
}

function escapeLabel(value: string): string {
  return value.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}
