// What a remote OpenAI-compatible server says about itself on GET /metrics (Prometheus text
// exposition): a small parser, and the figures the inspector can show for it. Only figures the
// remote actually reports are filled in; the rest stay null.
//   vLLM:       vllm:kv_cache_usage_perc (v1) / vllm:gpu_cache_usage_perc (v0), a 0..1 fraction
//               despite the name; vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total
//               (v1 counters, in tokens) or vllm:gpu_prefix_cache_hit_rate (v0, a 0..1 gauge)
//   llama.cpp:  llamacpp:kv_cache_usage_ratio (with --metrics)

export interface PrometheusSample {
  labels: Record<string, string>;
  value: number;
}

/** metric name → its samples (one per label set). Comments, HELP and TYPE lines are skipped. */
export type PrometheusSamples = Map<string, PrometheusSample[]>;

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$/;
const LABEL = /\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?/y;

function parseValue(text: string): number {
  if (text === '+Inf' || text === 'Inf') return Infinity;
  if (text === '-Inf') return -Infinity;
  if (text === 'NaN') return NaN;
  return Number(text);
}

function parseLabels(text: string): Record<string, string> | undefined {
  const labels: Record<string, string> = {};
  LABEL.lastIndex = 0;
  while (LABEL.lastIndex < text.length) {
    const start = LABEL.lastIndex;
    const match = LABEL.exec(text);
    if (!match) return text.slice(start).trim() === '' ? labels : undefined;
    labels[match[1]!] = match[2]!.replace(/\\(["\\n])/g, (_, c: string) => (c === 'n' ? '\n' : c));
  }
  return labels;
}

/** Parses Prometheus text format 0.0.4. Lines it cannot read are skipped, never fatal. */
export function parsePrometheus(text: string): PrometheusSamples {
  const samples: PrometheusSamples = new Map();
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const match = SAMPLE.exec(line);
    if (!match) continue;
    const labels = match[3] === undefined ? {} : parseLabels(match[3]);
    const value = parseValue(match[4]!);
    if (!labels || Number.isNaN(value)) continue;
    const name = match[1]!;
    const list = samples.get(name);
    if (list) list.push({ labels, value });
    else samples.set(name, [{ labels, value }]);
  }
  return samples;
}

/** The figures the inspector shows for a remote server; null where the server does not report one. */
export interface RemoteFigures {
  /** Share of the server's KV cache in use, 0..1. */
  kvCacheUsage: number | null;
  /** Share of prompt tokens served from the prefix cache, 0..1. */
  prefixCacheHitRate: number | null;
  /** The cumulative counters behind prefixCacheHitRate (vLLM v1), for rates between two polls. */
  prefixCacheHits: number | null;
  prefixCacheQueries: number | null;
}

function sum(samples: PrometheusSamples, ...names: string[]): number | null {
  for (const name of names) {
    const list = samples.get(name);
    if (list && list.length > 0) return list.reduce((total, sample) => total + sample.value, 0);
  }
  return null;
}

function mean(samples: PrometheusSamples, ...names: string[]): number | null {
  for (const name of names) {
    const list = samples.get(name);
    if (list && list.length > 0) return list.reduce((total, sample) => total + sample.value, 0) / list.length;
  }
  return null;
}

const clamp01 = (value: number) => Math.min(1, Math.max(0, value));

/**
 * The figures of one /metrics answer. With `since` (an earlier poll's figures), the prefix-cache
 * hit rate is the one between the two polls when queries happened in between; otherwise the
 * server's lifetime rate.
 */
export function remoteFigures(samples: PrometheusSamples, since?: RemoteFigures): RemoteFigures {
  const usage = mean(samples, 'vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc', 'llamacpp:kv_cache_usage_ratio');
  // vLLM v1 counters (the exposition adds `_total`; some exporters leave it off)
  const hits = sum(samples, 'vllm:prefix_cache_hits_total', 'vllm:prefix_cache_hits');
  const queries = sum(samples, 'vllm:prefix_cache_queries_total', 'vllm:prefix_cache_queries');
  let hitRate: number | null = null;
  if (hits !== null && queries !== null) {
    const dq = since?.prefixCacheQueries != null ? queries - since.prefixCacheQueries : 0;
    const dh = since?.prefixCacheHits != null ? hits - since.prefixCacheHits : 0;
    if (dq > 0 && dh >= 0) hitRate = clamp01(dh / dq);
    else if (queries > 0) hitRate = clamp01(hits / queries);
  } else {
    const gauge = mean(samples, 'vllm:gpu_prefix_cache_hit_rate');
    if (gauge !== null) hitRate = clamp01(gauge);
  }
  return { kvCacheUsage: usage === null ? null : clamp01(usage), prefixCacheHitRate: hitRate, prefixCacheHits: hits, prefixCacheQueries: queries };
}
