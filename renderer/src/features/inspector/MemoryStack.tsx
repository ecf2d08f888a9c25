// Where the memory goes right now: weights, KV rows in RAM, staged KV, partial keys and the rest
// of the process, stacked, with the KV pool's budget marked.
import type { StepMetrics } from '../../../../app/common/protocol.ts';
import { formatBytes } from '../../ui/format.ts';
import { memoryStack } from './data.ts';

export function MemoryStack({ memory }: { memory: StepMetrics['memory'] }) {
  const { segments, total, poolBudgetBytes, kvInPool } = memoryStack(memory);
  // The budget bounds the pool (KV rows + partial keys); mark it after the weights.
  const budgetEnd = memory.weightsBytes + poolBudgetBytes;
  const scale = Math.max(total, poolBudgetBytes > 0 ? budgetEnd : 0, 1);
  const pct = (bytes: number): string => `${((bytes / scale) * 100).toFixed(2)}%`;
  return (
    <div className="memory" aria-label="Memory now">
      <div className="memory-bar" role="img" aria-label={`Process memory ${formatBytes(total)}`}>
        {segments.map((s) => (
          <div key={s.key} className={`memory-seg inspector-mem-${s.key}`} style={{ width: pct(s.bytes) }} title={`${s.label}: ${formatBytes(s.bytes)}`} />
        ))}
        {poolBudgetBytes > 0 && <div className="memory-free-marker" style={{ left: pct(budgetEnd) }} title={`Pool budget: ${formatBytes(poolBudgetBytes)}`} />}
      </div>
      <ul className="memory-legend">
        {segments.map((s) => (
          <li key={s.key}>
            <span className={`swatch inspector-mem-${s.key}`} aria-hidden="true" /> {s.label}: {formatBytes(s.bytes)}
          </li>
        ))}
      </ul>
      <p className="muted" aria-label="Pool use">
        {poolBudgetBytes > 0
          ? `KV pool: ${formatBytes(kvInPool)} of its ${formatBytes(poolBudgetBytes)} budget (${((kvInPool / poolBudgetBytes) * 100).toFixed(0)}%), ${formatBytes(memory.poolBytes)} reserved.`
          : `KV pool: ${formatBytes(kvInPool)} used, ${formatBytes(memory.poolBytes)} reserved, no budget set.`}
      </p>
    </div>
  );
}
