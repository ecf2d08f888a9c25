// How a generation used the KV cache (done.cache), in words: the Writer's stats, Summarise and
// the Inspector's Compare all say it the same way.
import type { CacheReport } from '../../../app/common/protocol.ts';
import { formatBytes, formatMs } from './format.ts';

const DROPPED: Record<NonNullable<CacheReport['dropped']>, string> = {
  disabled: 'reuse was off for this run',
  policySwitch: 'the policy switch needed a new cache',
  evicted: 'the cache had evicted tokens',
  otherDocument: 'the cache held another document',
};

/** "reused N of M prompt tokens" (M: the prompt's tokens; reused + prefilled when not given). */
export function reuseText(cache: CacheReport, promptTokens?: number): string {
  const total = promptTokens && promptTokens > 0 ? promptTokens : cache.reusedTokens + cache.prefilledTokens;
  return `reused ${cache.reusedTokens.toLocaleString('en-US')} of ${total.toLocaleString('en-US')} prompt tokens`;
}

/** Where the reused tokens came from and why any were dropped, or '' when there is nothing to say. */
export function cacheDetails(cache: CacheReport): string[] {
  const parts: string[] = [];
  const snapshot = cache.snapshot;
  if (cache.source === 'snapshot') parts.push(`restored from snapshot${snapshot?.restoreMs !== undefined ? ` in ${formatMs(snapshot.restoreMs)}` : ''}`);
  if (cache.dropped) parts.push(`cache dropped: ${DROPPED[cache.dropped]}`);
  if (snapshot?.error) parts.push(`snapshot not used (${snapshot.error.code}): ${snapshot.error.message}`);
  if (snapshot?.saved) parts.push(`snapshot saved${snapshot.bytes !== undefined ? ` (${formatBytes(snapshot.bytes)})` : ''}`);
  return parts;
}
