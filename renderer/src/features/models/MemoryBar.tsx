// The memory estimate as one stacked bar (weights, KV at the chosen context, partial keys,
// staged rows) against the memory free right now, with a plain warning when it will not fit.
import { formatBytes } from '../../ui/format.ts';
import { memoryNeeded, memorySegments, type MemoryFigures } from './memory.ts';

export function MemoryBar({ memory }: { memory: MemoryFigures }) {
  const needed = memoryNeeded(memory);
  const scale = Math.max(needed, memory.freeBytes, 1);
  const fits = needed <= memory.freeBytes;
  const segments = memorySegments(memory);
  const pct = (bytes: number): string => `${((bytes / scale) * 100).toFixed(2)}%`;

  return (
    <div className="memory" aria-label="Memory estimate">
      <div className="memory-bar" role="img" aria-label={`Needs ${formatBytes(needed)} of ${formatBytes(memory.freeBytes)} free`}>
        {segments.map((s) => (
          <div key={s.key} className={`memory-seg memory-${s.key}`} style={{ width: pct(s.bytes) }} title={`${s.label}: ${formatBytes(s.bytes)}`} />
        ))}
        <div className="memory-free-marker" style={{ left: pct(memory.freeBytes) }} title={`Free: ${formatBytes(memory.freeBytes)}`} />
      </div>
      <ul className="memory-legend">
        {segments.map((s) => (
          <li key={s.key}>
            <span className={`swatch memory-${s.key}`} aria-hidden="true" /> {s.label}: {formatBytes(s.bytes)}
          </li>
        ))}
        <li>
          <span className="swatch memory-free" aria-hidden="true" /> Free now: {formatBytes(memory.freeBytes)}
          {memory.totalBytes > 0 ? ` of ${formatBytes(memory.totalBytes)}` : ''}
        </li>
      </ul>
      <p className={fits ? 'memory-ok' : 'memory-warning'} role={fits ? undefined : 'alert'}>
        {fits
          ? `Needs ${formatBytes(needed)}; fits in the ${formatBytes(memory.freeBytes)} free.`
          : `Will not fit: needs ${formatBytes(needed)} but only ${formatBytes(memory.freeBytes)} is free.` +
            (memory.maxContextThatFits !== null && memory.maxContextThatFits > 0
              ? ` The largest context that fits is about ${memory.maxContextThatFits.toLocaleString('en-US')} tokens.`
              : ' Even the weights alone do not fit; close other programs or pick a smaller model.')}
      </p>
    </div>
  );
}
