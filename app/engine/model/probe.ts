// What a model file or folder is, from its header alone, without loading it: the architecture it
// names and, when Longhand does not run that architecture, the refusal a load would give (the same
// text: gguf-model.ts ggufArchitectureRefusal, hf/config.ts hfArchitectureRefusal). The Models
// view shows it beside the file before anyone presses Load.
//
//   GGUF     the metadata up to general.architecture (the converter writes it first), read from
//            the file's first MiB; a key past that, or a header that does not parse, is "unknown"
//   folder   config.json's architectures[0]
//
// Cheap enough to run on every file of a library scan: one read of at most 1 MiB per file.
import { open, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { ggufArchitectureRefusal } from './gguf/gguf-model.ts';
import { hfArchitectureRefusal } from './hf/config.ts';

export interface ModelProbe {
  /** general.architecture (GGUF) or the config.json class name; null when the header does not say. */
  architecture: string | null;
  /** Why Longhand will refuse to load it (names the architecture and what Longhand runs); null when it may run. */
  refusal: string | null;
}

/** How much of a GGUF the probe reads: general.architecture sits in the first few dozen bytes of metadata. */
const GGUF_PROBE_BYTES = 1 << 20;

const UNKNOWN: ModelProbe = { architecture: null, refusal: null };

/** The architecture `path` (a .gguf file or a Hugging Face folder) names, and the refusal it would get. Never throws. */
export async function probeModel(path: string): Promise<ModelProbe> {
  try {
    if (path.toLowerCase().endsWith('.gguf') || !(await isFolder(path))) {
      const architecture = ggufArchitecture(await readHead(path, GGUF_PROBE_BYTES));
      return architecture === null ? UNKNOWN : { architecture, refusal: ggufArchitectureRefusal(architecture) ?? null };
    }
    const config = JSON.parse(await readFile(join(path, 'config.json'), 'utf8')) as { architectures?: unknown };
    const architecture = Array.isArray(config.architectures) && typeof config.architectures[0] === 'string' ? config.architectures[0] : null;
    return architecture === null ? UNKNOWN : { architecture, refusal: hfArchitectureRefusal(architecture) ?? null };
  } catch {
    return UNKNOWN; // unreadable or not a model: the load says why
  }
}

async function isFolder(path: string): Promise<boolean> {
  return (await stat(path)).isDirectory();
}

async function readHead(path: string, bytes: number): Promise<Uint8Array> {
  const handle = await open(path, 'r');
  try {
    const buffer = new Uint8Array(bytes);
    const { bytesRead } = await handle.read(buffer, 0, bytes, 0);
    return buffer.subarray(0, bytesRead);
  } finally {
    await handle.close();
  }
}

/** GGUF value types' sizes (scalars); 8 string and 9 array are read apart. */
const SCALAR_BYTES: Readonly<Record<number, number>> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
const STRING = 8;
const ARRAY = 9;

/**
 * general.architecture from the start of a GGUF file (magic, version 2 or 3, tensor and key
 * counts, then key/value pairs), or null when these bytes do not reach it or are not GGUF.
 */
export function ggufArchitecture(head: Uint8Array): string | null {
  const view = new DataView(head.buffer, head.byteOffset, head.byteLength);
  let pos = 0;
  const need = (n: number): boolean => pos + n <= head.length;
  const u32 = (): number => {
    const v = view.getUint32(pos, true);
    pos += 4;
    return v;
  };
  const u64 = (): number => {
    const v = view.getBigUint64(pos, true);
    pos += 8;
    return v > BigInt(head.length) ? Number.POSITIVE_INFINITY : Number(v);
  };
  const string = (): string | null => {
    if (!need(8)) return null;
    const n = u64();
    if (!need(n)) return null;
    const text = new TextDecoder('utf-8', { fatal: false }).decode(head.subarray(pos, pos + n));
    pos += n;
    return text;
  };
  const skip = (type: number): boolean => {
    if (type === STRING) return string() !== null;
    const size = SCALAR_BYTES[type];
    if (size !== undefined) {
      if (!need(size)) return false;
      pos += size;
      return true;
    }
    if (type !== ARRAY || !need(12)) return false;
    const item = u32();
    const count = u64();
    if (!Number.isFinite(count)) return false;
    for (let i = 0; i < count; i++) if (!skip(item)) return false;
    return true;
  };
  if (!need(24) || String.fromCharCode(...head.subarray(0, 4)) !== 'GGUF') return null;
  pos = 4;
  const version = u32();
  if (version !== 2 && version !== 3) return null;
  pos += 8; // tensor count
  const keys = u64();
  for (let k = 0; k < keys && Number.isFinite(keys); k++) {
    const key = string();
    if (key === null || !need(4)) return null;
    const type = u32();
    if (key === 'general.architecture') return type === STRING ? string() : null;
    if (!skip(type)) return null;
  }
  return null;
}
