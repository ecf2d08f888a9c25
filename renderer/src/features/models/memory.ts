// The memory estimate inside a models.inspect answer. The app API types that answer as a plain
// record (the engine's ModelReport is not the renderer's to import), so read it defensively:
// a missing or malformed figure means no bar, never a wrong one.

export interface MemoryFigures {
  contextTokens: number;
  weightsBytes: number;
  /** Full K and V rows at the context (a sliding-window layer: its ring and checkpoints only). */
  kvFullBytes: number;
  /** The part of kvFullBytes in sliding-window layers (their rings + checkpoints); 0 without them. */
  kvWindowBytes: number;
  /** Layers of each kind (window / global) from the report's per-layer estimate; null when it has none. */
  layerKinds: { window: number; global: number; windows: number[] } | null;
  partialKeyBytes: number;
  stagedKvBytes: number;
  freeBytes: number;
  totalBytes: number;
  maxContextThatFits: number | null;
}

export interface MemorySegment {
  key: 'weights' | 'kv' | 'kv-window' | 'partial' | 'staged';
  label: string;
  bytes: number;
}

const num = (value: unknown): number | undefined => (typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : undefined);

export function readMemory(report: Record<string, unknown> | null | undefined): MemoryFigures | null {
  const memory = report?.memory;
  if (typeof memory !== 'object' || memory === null) return null;
  const m = memory as Record<string, unknown>;
  const weightsBytes = num(m.weightsBytes);
  const kvFullBytes = num(m.kvFullBytes);
  const freeBytes = num(m.freeBytes);
  if (weightsBytes === undefined || kvFullBytes === undefined || freeBytes === undefined) return null;
  // the per-layer estimate (memory-estimate.ts kvLayers): window layers keep rings of their window
  const layers = Array.isArray(m.kvLayers) ? (m.kvLayers as Record<string, unknown>[]).filter((l) => typeof l === 'object' && l !== null) : [];
  const windowLayers = layers.filter((l) => l.kind === 'window');
  const kvWindowBytes = Math.min(kvFullBytes, windowLayers.reduce((a, l) => a + (num(l.rowBytes) ?? 0) + (num(l.checkpointBytes) ?? 0), 0));
  const layerKinds = layers.length > 0 ? { window: windowLayers.length, global: layers.length - windowLayers.length, windows: [...new Set(windowLayers.map((l) => num(l.window) ?? 0))] } : null;
  return {
    contextTokens: num(m.contextTokens) ?? 0,
    weightsBytes,
    kvFullBytes,
    kvWindowBytes,
    layerKinds,
    partialKeyBytes: num(m.partialKeyBytes) ?? 0,
    stagedKvBytes: num(m.stagedKvBytes) ?? 0,
    freeBytes,
    totalBytes: num(m.totalBytes) ?? 0,
    maxContextThatFits: num(m.maxContextThatFits) ?? null,
  };
}

export function memorySegments(m: MemoryFigures): MemorySegment[] {
  const at = m.contextTokens.toLocaleString('en-US');
  // a model with sliding-window layers: their rings apart from the global layers' rows
  const kv: MemorySegment[] =
    m.kvWindowBytes > 0 && m.layerKinds
      ? [
          { key: 'kv', label: `KV cache at ${at} tokens, ${m.layerKinds.global} global layers`, bytes: m.kvFullBytes - m.kvWindowBytes },
          { key: 'kv-window', label: `KV of ${m.layerKinds.window} window layers (window ${m.layerKinds.windows.join('/')}: rings + checkpoints)`, bytes: m.kvWindowBytes },
        ]
      : [{ key: 'kv', label: `KV cache at ${at} tokens`, bytes: m.kvFullBytes }];
  return [
    { key: 'weights', label: 'Weights', bytes: m.weightsBytes },
    ...kv,
    { key: 'partial', label: 'Partial keys', bytes: m.partialKeyBytes },
    { key: 'staged', label: 'Staged rows', bytes: m.stagedKvBytes },
  ];
}

export function memoryNeeded(m: MemoryFigures): number {
  return m.weightsBytes + m.kvFullBytes + m.partialKeyBytes + m.stagedKvBytes;
}

/** A few plain facts from the report besides memory, for the details table. */
export function reportFacts(report: Record<string, unknown>): [string, string][] {
  const facts: [string, string][] = [];
  const add = (label: string, key: string): void => {
    const value = report[key];
    if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') facts.push([label, typeof value === 'number' ? value.toLocaleString('en-US') : String(value)]);
  };
  add('Format', 'format');
  add('Architecture', 'architecture');
  add('Parameters', 'parameters');
  add('Layers', 'layers');
  add('Heads / KV heads', 'heads');
  add('KV heads', 'kvHeads');
  add('Trained context', 'trainedContext');
  add('Chat template', 'chatTemplate');
  return facts;
}
