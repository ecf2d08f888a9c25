// The corrupt-file table (after ggml's tests/test-gguf.cpp): deliberately broken GGUF files, each
// built from a valid miniature model and crossed with seeds, each expected to fail with one
// specific ModelFileError code and a message that names the problem.
import { describe, expect, it } from 'vitest';
import { ModelFileError, type ErrorCode } from '../../../common/errors.ts';
import { bv, buildGguf, rng, tinyLlama, type BTensor, type BValue, type GgufLayout } from './gguf-test-builder.ts';
import { ggufToLoadedModel } from './gguf-model.ts';
import { parseGguf } from './reader.ts';

const FILE = 'broken.gguf';
const SEEDS = [1, 2, 3];

interface Built {
  bytes: Uint8Array;
  layout: GgufLayout;
}

function model(seed: number, edit?: (kvs: [string | Uint8Array, BValue][], tensors: BTensor[]) => void): Built {
  const { kvs, tensors } = tinyLlama({ seed });
  const k: [string | Uint8Array, BValue][] = kvs;
  edit?.(k, tensors);
  return buildGguf(k, tensors);
}

function edited(seed: number, edit: (kvs: [string | Uint8Array, BValue][], tensors: BTensor[]) => void): Uint8Array {
  return model(seed, edit).bytes;
}

function setU32(b: Built, at: number, value: number): Uint8Array {
  new DataView(b.bytes.buffer).setUint32(at, value, true);
  return b.bytes;
}

function setU64(b: Built, at: number, value: bigint): Uint8Array {
  new DataView(b.bytes.buffer).setBigUint64(at, BigInt.asUintN(64, value), true);
  return b.bytes;
}

const kvAt = (b: Built, key: string): GgufLayout['kv'][number] => {
  const entry = b.layout.kv.find((e) => e.key === key);
  if (entry === undefined) throw new Error(`test bug: no key ${key}`);
  return entry;
};

const pick = <T>(items: readonly T[], seed: number): T => items[seed % items.length] as T;

const replaceKv = (kvs: [string | Uint8Array, BValue][], key: string, value: BValue): void => {
  const i = kvs.findIndex(([k]) => k === key);
  kvs[i] = [key, value];
};

interface Case {
  name: string;
  code: ErrorCode;
  message: RegExp;
  /** Also run the model loader (for errors that only the loader can see). */
  load?: boolean;
  make: (seed: number) => Uint8Array;
}

const CASES: Case[] = [
  // ---- header
  { name: 'bad magic', code: 'MODEL_BAD_MAGIC', message: /not a GGUF file/, make: (s) => { const b = model(s).bytes; b[s % 4] = (b[s % 4] as number) ^ 0x20; return b; } },
  { name: 'old ggjt magic', code: 'MODEL_BAD_MAGIC', message: /old ggml/, make: (s) => { const b = model(s).bytes; b.set([0x74, 0x6a, 0x67, 0x67]); return b; } },
  { name: 'empty file', code: 'MODEL_TRUNCATED', message: /magic/, make: () => new Uint8Array(0) },
  { name: 'GGUF v1', code: 'MODEL_UNSUPPORTED_VERSION', message: /version 1 /, make: (s) => setU32(model(s), 4, 1) },
  { name: 'version 0', code: 'MODEL_UNSUPPORTED_VERSION', message: /version 0/, make: (s) => setU32(model(s), 4, 0) },
  { name: 'future version', code: 'MODEL_UNSUPPORTED_VERSION', message: /version \d+ .*2 and 3/, make: (s) => setU32(model(s), 4, pick([4, 5, 0x7fffffff], s)) },
  { name: 'big-endian file', code: 'MODEL_UNSUPPORTED_VERSION', message: /big-endian/, make: (s) => setU32(model(s), 4, pick([2, 3], s) << 24) },
  { name: 'absurd tensor count', code: 'MODEL_ABSURD_COUNT', message: /tensor count is \d+/, make: (s) => setU64(model(s), 8, pick([2n ** 40n, 2n ** 64n - 1n, 2n ** 31n + BigInt(s)], s)) },
  { name: 'absurd metadata count', code: 'MODEL_ABSURD_COUNT', message: /metadata count is \d+/, make: (s) => setU64(model(s), 16, pick([2n ** 40n, 2n ** 63n, 2n ** 32n + BigInt(s)], s)) },
  { name: 'counts larger than a short file', code: 'MODEL_TRUNCATED', message: /file ends at byte \d+, but the metadata count \(1\d+\) needs/, make: (s) => setU64(model(s), 16, 10_000n + BigInt(s)) },
  // ---- metadata
  { name: 'absurd key length', code: 'MODEL_ABSURD_COUNT', message: /length of metadata key #\d+ is/, make: (s) => { const b = model(s); return setU64(b, pick(b.layout.kv, s).keyAt, 2n ** 62n + BigInt(s)); } },
  { name: 'absurd string value length', code: 'MODEL_ABSURD_COUNT', message: /length of the value of "general\.name"/, make: (s) => { const b = model(s); return setU64(b, kvAt(b, 'general.name').valueAt, 2n ** 40n * BigInt(s)); } },
  { name: 'absurd array length', code: 'MODEL_ABSURD_COUNT', message: /length of array "tokenizer\.ggml\.(tokens|scores)"/, make: (s) => { const b = model(s); return setU64(b, kvAt(b, pick(['tokenizer.ggml.tokens', 'tokenizer.ggml.scores'], s)).valueAt + 4, 2n ** 40n + BigInt(s)); } },
  { name: 'nested array bomb (wide)', code: 'MODEL_ABSURD_COUNT', message: /length of array "bomb(\[0\])?"/, make: (s) => edited(s, (kvs) => kvs.push(['bomb', s % 2 ? bv.arr('array', [], 2n ** 60n) : bv.arr('array', [bv.arr('array', [], 2n ** 61n)])])) },
  { name: 'nested array bomb (deep)', code: 'MODEL_BAD_VALUE', message: /nests arrays deeper than 16/, make: (s) => edited(s, (kvs) => { let v = bv.arr('uint8', []); for (let i = 0; i < 16 + s; i++) v = bv.arr('array', [v]); kvs.push(['deep', v]); }) },
  { name: 'duplicate metadata key', code: 'MODEL_DUPLICATE_KEY', message: /metadata key ".+" appears twice/, make: (s) => edited(s, (kvs) => kvs.push([pick(kvs, s)[0], bv.u32(1)])) },
  { name: 'duplicate tensor name', code: 'MODEL_DUPLICATE_KEY', message: /tensor ".+" appears twice/, make: (s) => edited(s, (_, tensors) => { const t = pick(tensors, s); tensors.push({ ...t }); }) },
  { name: 'unknown value type tag', code: 'MODEL_BAD_VALUE', message: /unknown value type tag \d+/, make: (s) => { const b = model(s); return setU32(b, pick(b.layout.kv, s).tagAt, pick([13, 99, 0xffffffff], s)); } },
  { name: 'unknown array item type', code: 'MODEL_BAD_VALUE', message: /unknown value type tag 1[3-9]/, make: (s) => { const b = model(s); return setU32(b, kvAt(b, 'tokenizer.ggml.tokens').valueAt, 12 + s); } },
  { name: 'bad UTF-8 in a key', code: 'MODEL_BAD_VALUE', message: /metadata key #\d+ is not valid UTF-8/, make: (s) => edited(s, (kvs) => kvs.push([pick([new Uint8Array([0x61, 0xc3, 0x28]), new Uint8Array([0xff]), new Uint8Array([0xed, 0xa0, 0x80])], s), bv.u8(1)])) },
  { name: 'bad UTF-8 in a string array', code: 'MODEL_BAD_VALUE', message: /item \d+ of "tokenizer\.ggml\.tokens" is not valid UTF-8/, make: (s) => edited(s, (kvs) => replaceKv(kvs, 'tokenizer.ggml.tokens', bv.arr('string', Array.from({ length: 16 }, (_, i) => bv.str(i === s ? new Uint8Array([0xe2, 0x82]) : `t${i}`))))) },
  { name: 'bool that is not 0 or 1', code: 'MODEL_BAD_VALUE', message: /bool stored as \d+/, make: (s) => edited(s, (kvs) => kvs.push(['flag', bv.bool(1 + s)])) },
  { name: 'empty key', code: 'MODEL_BAD_VALUE', message: /metadata key #\d+ is empty/, make: (s) => edited(s, (kvs) => kvs.push(['', bv.u8(s)])) },
  // ---- alignment
  { name: 'alignment 0 or not a power of two', code: 'MODEL_MISALIGNED', message: /general\.alignment \d+ is not a non-zero power of two/, make: (s) => edited(s, (kvs) => kvs.push(['general.alignment', bv.u32(pick([0, 3, 48], s))])) },
  { name: 'alignment of the wrong type', code: 'MODEL_BAD_VALUE', message: /general\.alignment must be a uint32/, make: (s) => edited(s, (kvs) => kvs.push(['general.alignment', pick([bv.u64(32n), bv.str('32'), bv.i32(32)], s)])) },
  // ---- tensor directory
  { name: 'misaligned tensor offset', code: 'MODEL_MISALIGNED', message: /data offset \d+, not a multiple of the alignment 32/, make: (s) => { const b = model(s); return setU64(b, pick(b.layout.tensors, s).offsetAt, BigInt(32 * s + s)); } },
  { name: 'tensor data past the end', code: 'MODEL_TENSOR_OUT_OF_BOUNDS', message: /ends past the end of the data section/, make: (s) => { const b = model(s); return setU64(b, pick(b.layout.tensors, s).offsetAt, 2n ** 30n * BigInt(s)); } },
  { name: 'tensor offset past 2^53', code: 'MODEL_TENSOR_OUT_OF_BOUNDS', message: /far past the end/, make: (s) => { const b = model(s); return setU64(b, pick(b.layout.tensors, s).offsetAt, 2n ** 60n); } },
  { name: 'dimension product overflow', code: 'MODEL_DIMENSION_OVERFLOW', message: /more than 2\^53 elements/, make: (s) => edited(s, (_, tensors) => tensors.push({ name: 'huge', ne: pick([[2n ** 32n, 2n ** 32n], [2n ** 20n, 2n ** 20n, 2n ** 20n], [2n ** 54n]], s), type: 0, data: new Uint8Array(0) })) },
  { name: 'n_dims 0 or > 4', code: 'MODEL_BAD_VALUE', message: /has \d+ dimensions \(1 to 4 allowed\)/, make: (s) => { const b = model(s); return setU32(b, pick(b.layout.tensors, s).nDimsAt, pick([0, 5, 0xffffffff], s)); } },
  { name: 'zero-size dimension', code: 'MODEL_DIMENSION_OVERFLOW', message: /zero-size dimension/, make: (s) => { const b = model(s); return setU64(b, pick(b.layout.tensors, s).neAt, 0n); } },
  { name: 'negative dimension', code: 'MODEL_DIMENSION_OVERFLOW', message: /negative dimension/, make: (s) => { const b = model(s); return setU64(b, pick(b.layout.tensors, s).neAt, -BigInt(s)); } },
  { name: 'unknown tensor type id', code: 'MODEL_UNKNOWN_TENSOR_TYPE', message: /unknown ggml type id (4|5|31|40|1\d\d\d)\b/, make: (s) => { const b = model(s); return setU32(b, pick(b.layout.tensors, s).typeAt, pick([4, 5, 31, 40, 1000 + s], s)); } },
  { name: 'known but unsupported type', code: 'MODEL_UNKNOWN_TENSOR_TYPE', message: /type (Q2_K|Q3_K|Q8_K|IQ2_XXS|Q8_1) \(ggml type \d+\), which Longhand does not support/, make: (s) => edited(s, (_, tensors) => tensors.push({ name: 'odd', ne: [256], type: pick([10, 11, 15, 16, 9], s) })) },
  { name: 'row not a whole number of blocks', code: 'MODEL_MISALIGNED', message: /rows of \d+ elements, not a whole number of (Q4_0|Q8_0|Q6_K) blocks/, make: (s) => edited(s, (_, tensors) => tensors.push({ name: 'ragged', ne: [pick([33, 48, 100], s), 2], type: pick([2, 8, 14], s), data: new Uint8Array(512) })) },
  { name: 'empty tensor name', code: 'MODEL_BAD_VALUE', message: /empty name/, make: (s) => edited(s, (_, tensors) => tensors.push({ name: '', ne: [s], type: 0 })) },
  // ---- truncation, at many points
  ...truncations(),
  // ---- what only the model loader sees
  { name: 'missing required metadata', code: 'MODEL_MISSING_METADATA', load: true, message: /metadata key "(llama\.block_count|llama\.embedding_length|llama\.attention\.head_count|llama\.attention\.layer_norm_rms_epsilon|general\.architecture)" is missing/, make: (s) => edited(s, (kvs) => { const key = pick(['llama.block_count', 'llama.embedding_length', 'llama.attention.head_count', 'llama.attention.layer_norm_rms_epsilon', 'general.architecture'], s + (s > 1 ? 1 : 0)); kvs.splice(kvs.findIndex(([k]) => k === key), 1); }) },
  { name: 'metadata of the wrong type', code: 'MODEL_BAD_VALUE', load: true, message: /"llama\.(block_count|context_length)" should be an integer, not (string|float32)/, make: (s) => edited(s, (kvs) => replaceKv(kvs, pick(['llama.block_count', 'llama.context_length'], s), pick([bv.str('5'), bv.f32(5)], s))) },
  { name: 'unsupported architecture', code: 'MODEL_UNSUPPORTED_ARCHITECTURE', load: true, message: /architecture "(gpt2|rwkv6|mamba)" is not supported/, make: (s) => edited(s, (kvs) => replaceKv(kvs, 'general.architecture', bv.str(pick(['gpt2', 'rwkv6', 'mamba'], s)))) },
  { name: 'missing tensor', code: 'MODEL_MISSING_TENSOR', load: true, message: /tensor .+ is missing/, make: (s) => edited(s, (_, tensors) => { tensors.splice(1 + s * 5, 1); }) },
  { name: 'missing token embedding', code: 'MODEL_MISSING_TENSOR', load: true, message: /token_embd\.weight is missing/, make: (s) => edited(s, (_, tensors) => { tensors.splice(0, 1); }) },
  { name: 'shape mismatch', code: 'MODEL_SHAPE_MISMATCH', load: true, message: /has shape \[\d+(, \d+)*\], expected \[\d+(, \d+)*\]/, make: (s) => edited(s, (_, tensors) => { const t = pick(tensors.filter((x) => x.ne.length === 2), s); t.ne = [t.ne[0] as number, (t.ne[1] as number) * 2]; delete t.data; }) },
];

function truncations(): Case[] {
  const at = (name: string, where: (b: Built, s: number) => number): Case => ({
    name: `truncated ${name}`,
    code: 'MODEL_TRUNCATED',
    message: /file ends at byte \d+/,
    make: (s) => {
      const b = model(s);
      return b.bytes.slice(0, where(b, s));
    },
  });
  return [
    at('in the magic', (_, s) => s),
    at('in the version', (_, s) => 4 + s),
    at('in the tensor count', (_, s) => 8 + s * 2),
    at('in the metadata count', (_, s) => 16 + s * 2),
    at('in a key length', (b, s) => pick(b.layout.kv, s).keyAt + 3 + s),
    at('in a key', (b, s) => pick(b.layout.kv, s).keyAt + 8 + s),
    at('in a value type', (b, s) => pick(b.layout.kv, s).tagAt + 1 + (s % 3)),
    at('in a string value', (b, s) => kvAt(b, 'general.architecture').valueAt + 8 + (s % 4)),
    at('in a float value', (b, s) => kvAt(b, 'llama.attention.layer_norm_rms_epsilon').valueAt + (s % 4)),
    at('in a string array', (b, s) => kvAt(b, 'tokenizer.ggml.tokens').valueAt + 12 + 20 * s),
    at('in a float array', (b, s) => kvAt(b, 'tokenizer.ggml.scores').valueAt + 12 + 5 * s),
    at('in a tensor name', (b, s) => pick(b.layout.tensors, s).infoAt + 9 + s),
    at('in n_dims', (b, s) => pick(b.layout.tensors, s).nDimsAt + 1 + s),
    at('in a dimension', (b, s) => pick(b.layout.tensors, s).neAt + 3 + s),
    at('in a tensor type', (b, s) => pick(b.layout.tensors, s).typeAt + s),
    at('in a tensor offset', (b, s) => pick(b.layout.tensors, s).offsetAt + 2 * s),
    at('before the data section', (b) => (b.layout.tensors.at(-1)?.offsetAt ?? 0) + 8),
    at('in the tensor data', (b, s) => b.layout.dataOffset + Math.floor(rng(s)() * (b.bytes.length - b.layout.dataOffset - 1))),
    at('in the last tensor', (b, s) => b.bytes.length - s * 7),
  ];
}

function run(bytes: Uint8Array, load: boolean): void {
  const file = parseGguf(bytes, FILE);
  if (load) ggufToLoadedModel(file);
}

describe('corrupt GGUF files', () => {
  it('has a table of at least 20 kinds', () => {
    expect(CASES.length).toBeGreaterThanOrEqual(20);
  });

  for (const c of CASES) {
    for (const seed of SEEDS) {
      it(`${c.name} (seed ${seed}) → ${c.code}`, () => {
        const bytes = c.make(seed);
        let caught: unknown;
        try {
          run(bytes, c.load ?? false);
        } catch (error) {
          caught = error;
        }
        expect(caught, 'should have thrown').toBeInstanceOf(ModelFileError);
        const error = caught as ModelFileError;
        expect(error.code, error.message).toBe(c.code);
        expect(error.message).toMatch(c.message);
        expect(error.message.startsWith(`${FILE}: `)).toBe(true);
        if (!c.load) {
          expect(error.offset, 'parse errors give an offset').toBeTypeOf('number');
          expect(error.message).toMatch(/\(at byte \d+\)$/);
        }
      });
    }
  }

  it('the valid files behind the table load', () => {
    for (const seed of SEEDS) expect(() => run(model(seed).bytes, true)).not.toThrow();
  });

  it('fails at once on 2^40 strings in a 1 MB file, allocating nothing', () => {
    const b = model(1, (kvs) => kvs.push(['padding', bv.str('x'.repeat(1 << 20))]));
    setU64(b, kvAt(b, 'tokenizer.ggml.tokens').valueAt + 4, 2n ** 40n);
    expect(b.bytes.length).toBeGreaterThan(1 << 20);
    const start = performance.now();
    expect(() => parseGguf(b.bytes, FILE)).toThrow(expect.objectContaining({ code: 'MODEL_ABSURD_COUNT' }));
    expect(performance.now() - start).toBeLessThan(100);
  });
});
