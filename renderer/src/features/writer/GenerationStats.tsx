// The figures under every generation: tokens, TTFT, tokens/s, context used N of M, stop reason,
// and once it is done how the prompt used the KV cache (reused N of M prompt tokens, restored from
// a document snapshot, why a cache was dropped). Fed by the engine client's metrics (at most 10
// updates a second).
import type { GenerationMetrics } from '../../engine/client.ts';
import { cacheDetails, reuseText } from '../../ui/cache-report.ts';
import { formatMs, formatRate } from '../../ui/format.ts';

const STOP_REASONS: Record<string, string> = {
  eos: 'end of text',
  stopString: 'stop string',
  maxTokens: 'token limit',
  contextLimit: 'context full',
  cancelled: 'stopped',
  error: 'error',
};

export function GenerationStats({ metrics, steps }: { metrics: GenerationMetrics; steps?: number }) {
  const used = metrics.promptTokens + metrics.completionTokens;
  return (
    <dl className="stats" aria-label="Generation stats">
      <div><dt>Tokens</dt><dd data-stat="tokens">{metrics.completionTokens}</dd></div>
      <div><dt>TTFT</dt><dd data-stat="ttft">{formatMs(metrics.ttftMs)}</dd></div>
      <div><dt>Tokens/s</dt><dd data-stat="rate">{formatRate(metrics.tokensPerS)}</dd></div>
      <div><dt>Context</dt><dd data-stat="context">{metrics.contextLength ? `${used.toLocaleString('en-US')} of ${metrics.contextLength.toLocaleString('en-US')}` : '–'}</dd></div>
      <div><dt>Stop</dt><dd data-stat="stop">{metrics.stopReason ? (STOP_REASONS[metrics.stopReason] ?? metrics.stopReason) : 'running…'}</dd></div>
      {metrics.cache && (
        <div>
          <dt>Prompt cache</dt>
          <dd data-stat="cache">
            <span data-stat="reuse">{reuseText(metrics.cache, metrics.promptTokens)}</span>
            {cacheDetails(metrics.cache).map((part) => <span key={part}> · {part}</span>)}
          </dd>
        </div>
      )}
      {steps !== undefined && steps > 0 && <div><dt>Steps</dt><dd data-stat="steps">{steps}</dd></div>}
      {metrics.error && <div><dt>Error</dt><dd data-stat="error">{metrics.error.code}: {metrics.error.message}</dd></div>}
    </dl>
  );
}
