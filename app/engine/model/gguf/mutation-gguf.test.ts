// Seeded random mutation of valid GGUF files (the real stories260K and builder-made models in v2
// and v3, F32 and every quantised type): bit flips, bytes set to 0x00/0xFF/random, truncation,
// chunks duplicated or deleted, length fields overwritten with huge values. Every case must either
// parse (and then load, view and dequantise) or fail with a ModelFileError: never another
// exception, never a hang. Prints the number of cases and the outcomes by error code.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ModelFileError } from '../../../common/errors.ts';
import { haveSharedModel, STORIES_260K } from '../../../../test/support/models.ts';
import { buildGguf, rng, tinyLlama, type GgufLayout } from './gguf-test-builder.ts';
import { ggufToLoadedModel } from './gguf-model.ts';
import { parseGguf } from './reader.ts';

const CASES_PER_SOURCE = 1500;
const MASTER_SEED = 20240611;

interface Source {
  name: string;
  bytes: Uint8Array;
  /** End of the header (where most mutations land, since that is where the parser decides things). */
  headerEnd: number;
  /** Offsets of length/count fields (u64), when known. */
  lengthFields: number[];
}

function fromBuilder(name: string, built: { bytes: Uint8Array; layout: GgufLayout }): Source {
  const l = built.layout;
  const lengthFields = [l.tensorCountAt, l.kvCountAt, ...l.kv.map((k) => k.keyAt), ...l.tensors.flatMap((t) => [t.infoAt, t.neAt, t.offsetAt])];
  return { name, bytes: built.bytes, headerEnd: l.dataOffset, lengthFields };
}

function sources(): Source[] {
  const out: Source[] = [];
  if (haveSharedModel()) {
    const raw = readFileSync(STORIES_260K);
    const bytes = new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength);
    out.push({ name: 'stories260K', bytes, headerEnd: parseGguf(bytes, 'stories').dataOffset, lengthFields: [8, 16, 24, 0x3a] });
  }
  const f32 = tinyLlama({ seed: 7 });
  out.push(fromBuilder('tiny-f32-v3', buildGguf(f32.kvs, f32.tensors)));
  const quant = tinyLlama({
    seed: 8, hidden: 256, heads: 8, kvHeads: 4, ffn: 32, layers: 1, vocab: 8,
    types: { 'attn_q.weight': 'Q4_K', 'attn_k.weight': 'Q5_K', 'attn_v.weight': 'Q6_K', 'attn_output.weight': 'Q8_0', 'ffn_gate.weight': 'Q4_0', 'ffn_up.weight': 'Q5_0', 'ffn_down.weight': 'Q4_1', 'output.weight': 'F16', 'token_embd.weight': 'BF16', 'ffn_norm.weight': 'Q5_1' },
  });
  out.push(fromBuilder('tiny-quant-v2', buildGguf(quant.kvs, quant.tensors, { version: 2 })));
  const qwen = tinyLlama({ seed: 9, family: 'qwen2', qkvBias: true, tied: true });
  out.push(fromBuilder('tiny-qwen2-v3', buildGguf(qwen.kvs, qwen.tensors)));
  return out;
}

const HUGE = [2n ** 63n, 2n ** 64n - 1n, 2n ** 32n, 2n ** 40n, 2n ** 53n, 2n ** 31n - 1n];

function mutate(src: Source, random: () => number): { bytes: Uint8Array; what: string } {
  const int = (n: number): number => Math.floor(random() * n);
  const position = (): number => (random() < 0.75 ? int(src.headerEnd) : int(src.bytes.length));
  const kind = int(7);
  switch (kind) {
    case 0: {
      const b = src.bytes.slice();
      const flips = 1 + int(4);
      const at: number[] = [];
      for (let i = 0; i < flips; i++) {
        const p = position();
        b[p] = (b[p] as number) ^ (1 << int(8));
        at.push(p);
      }
      return { bytes: b, what: `bit flips at ${at.join(',')}` };
    }
    case 1: {
      const b = src.bytes.slice();
      const value = [0x00, 0xff, int(256)][int(3)] as number;
      const p = position();
      const n = 1 + int(8);
      b.fill(value, p, p + n);
      return { bytes: b, what: `${n} bytes set to ${value} at ${p}` };
    }
    case 2: {
      const n = random() < 0.7 ? int(src.headerEnd + 64) : int(src.bytes.length);
      return { bytes: src.bytes.subarray(0, n), what: `truncated to ${n}` };
    }
    case 3: {
      const a = position();
      const len = 1 + int(64);
      const at = position();
      const chunk = src.bytes.subarray(a, a + len);
      const b = new Uint8Array(src.bytes.length + chunk.length);
      b.set(src.bytes.subarray(0, at));
      b.set(chunk, at);
      b.set(src.bytes.subarray(at), at + chunk.length);
      return { bytes: b, what: `${chunk.length} bytes from ${a} duplicated at ${at}` };
    }
    case 4: {
      const a = position();
      const len = 1 + int(64);
      const b = new Uint8Array(src.bytes.length - Math.min(len, src.bytes.length - a));
      b.set(src.bytes.subarray(0, a));
      b.set(src.bytes.subarray(a + len), a);
      return { bytes: b, what: `${len} bytes deleted at ${a}` };
    }
    default: {
      const b = src.bytes.slice();
      const p = random() < 0.6 && src.lengthFields.length > 0 ? (src.lengthFields[int(src.lengthFields.length)] as number) : position();
      const value = random() < 0.8 ? (HUGE[int(HUGE.length)] as bigint) : BigInt(int(2 ** 32)) * BigInt(int(2 ** 32));
      if (p + 8 <= b.length) new DataView(b.buffer).setBigUint64(p, value, true);
      return { bytes: b, what: `u64 at ${p} set to ${value}` };
    }
  }
}

/** Parse, load, view every tensor and dequantise the small ones. Returns the outcome label. */
function exercise(bytes: Uint8Array): string {
  try {
    const file = parseGguf(bytes, 'mutant.gguf');
    for (const info of file.tensors.values()) {
      const view = file.tensorView(info.name);
      if (view.bytes().length !== info.byteSize) throw new Error(`view of ${info.name} has the wrong size`);
      if (view.elements <= 1 << 16) view.toFloat32();
    }
    try {
      ggufToLoadedModel(file);
      return 'loads';
    } catch (error) {
      if (error instanceof ModelFileError) return `parses, load: ${error.code}`;
      throw error;
    }
  } catch (error) {
    if (error instanceof ModelFileError) return error.code;
    throw error;
  }
}

describe('random mutations of valid GGUF files', () => {
  it(`never throws anything but ModelFileError (${CASES_PER_SOURCE} cases per source)`, () => {
    const all = sources();
    const outcomes = new Map<string, number>();
    const random = rng(MASTER_SEED);
    let cases = 0;
    let slowest = 0;
    const start = performance.now();
    for (const src of all) {
      expect(exercise(src.bytes), `${src.name} itself`).toBe('loads');
      for (let i = 0; i < CASES_PER_SOURCE; i++) {
        const { bytes, what } = mutate(src, random);
        const t0 = performance.now();
        let outcome: string;
        try {
          outcome = exercise(bytes);
        } catch (error) {
          throw new Error(`${src.name} case ${i} (${what}) threw ${String(error)}`, { cause: error });
        }
        const took = performance.now() - t0;
        slowest = Math.max(slowest, took);
        expect(took, `${src.name} case ${i} (${what})`).toBeLessThan(1000);
        outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
        cases++;
      }
    }
    const total = performance.now() - start;
    const table = [...outcomes].sort((a, b) => b[1] - a[1]).map(([k, v]) => `  ${k.padEnd(40)} ${v}`).join('\n');
    console.log(`GGUF mutation: ${cases} cases over ${all.map((s) => s.name).join(', ')} in ${(total / 1000).toFixed(1)} s (slowest case ${slowest.toFixed(1)} ms)\n${table}`);
    expect(cases).toBeGreaterThanOrEqual(all.length * CASES_PER_SOURCE);
    expect(total).toBeLessThan(45_000);
  });
});
