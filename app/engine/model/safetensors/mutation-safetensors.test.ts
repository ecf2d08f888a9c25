// Seeded random mutations of valid safetensors files (and config.json texts): every outcome must
// be either success or a ModelFileError, and a file that parses must have readable tensors.
import { describe, expect, it } from 'vitest';
import { ModelFileError } from '../../../common/errors.ts';
import { baseConfig } from '../hf/hf-test-folder.ts';
import { parseHfConfig } from '../hf/config.ts';
import type { SafetensorsDType } from './dtype.ts';
import { DTYPE_BYTES } from './dtype.ts';
import { parseSafetensors } from './parse.ts';
import { assembleSafetensors, encodeSafetensors, randomValues, seededRandom, type WriterTensor } from './safetensors-test-writer.ts';

type Random = () => number;
const int = (random: Random, n: number): number => Math.floor(random() * n);

function validFile(random: Random): Uint8Array {
  const dtypes: SafetensorsDType[] = ['F32', 'F16', 'BF16'];
  const tensors: WriterTensor[] = [];
  const count = 1 + int(random, 5);
  for (let i = 0; i < count; i++) {
    const rank = int(random, 4);
    const shape = Array.from({ length: rank }, () => int(random, 6));
    tensors.push({ name: `t${i}.w`, dtype: dtypes[int(random, 3)]!, shape, values: randomValues(random, shape.reduce((a, b) => a * b, 1)) });
  }
  return encodeSafetensors(tensors, random() < 0.5 ? { format: 'pt' } : undefined);
}

const headerEnd = (file: Uint8Array): number => 8 + Number(new DataView(file.buffer, file.byteOffset).getBigUint64(0, true));
const JSON_CHARS = '{}[],:"-.eE+0123456789 \\tnuF';

/** Each mutator edits a fresh copy. */
const MUTATORS: Record<string, (file: Uint8Array, random: Random) => Uint8Array> = {
  'flip header bits': (file, random) => {
    const end = headerEnd(file);
    for (let n = 1 + int(random, 4); n > 0; n--) file[8 + int(random, end - 8)]! ^= 1 << int(random, 8);
    return file;
  },
  'flip any bits': (file, random) => {
    for (let n = 1 + int(random, 4); n > 0; n--) file[int(random, file.length)]! ^= 1 << int(random, 8);
    return file;
  },
  'overwrite length field': (file, random) => {
    const view = new DataView(file.buffer, file.byteOffset);
    const old = view.getBigUint64(0, true);
    const choice = int(random, 4);
    const value =
      choice === 0 ? old + BigInt(int(random, 33) - 16) : choice === 1 ? BigInt(int(random, file.length + 16)) : choice === 2 ? 1n << BigInt(int(random, 64)) : BigInt.asUintN(64, BigInt(Math.floor(random() * 2 ** 53)) << BigInt(int(random, 12)));
    view.setBigUint64(0, BigInt.asUintN(64, value < 0n ? 0n : value), true);
    return file;
  },
  truncate: (file, random) => file.slice(0, int(random, file.length)),
  'change a digit': (file, random) => {
    const end = headerEnd(file);
    const digits: number[] = [];
    for (let i = 8; i < end; i++) if (file[i]! >= 0x30 && file[i]! <= 0x39) digits.push(i);
    for (let n = 1 + int(random, 2); n > 0 && digits.length > 0; n--) file[digits[int(random, digits.length)]!] = 0x30 + int(random, 10);
    return file;
  },
  'JSON punctuation': (file, random) => {
    const end = headerEnd(file);
    file[8 + int(random, end - 8)] = JSON_CHARS.charCodeAt(int(random, JSON_CHARS.length));
    return file;
  },
  'shift header bytes': (file, random) => {
    const end = headerEnd(file);
    const at = 8 + int(random, end - 8);
    if (random() < 0.5) file.copyWithin(at, at + 1, end); // delete one, keep the length
    else file.copyWithin(at + 1, at, end - 1); // insert one
    return file;
  },
  'duplicate a header span': (file, random) => {
    const end = headerEnd(file);
    const from = 9 + int(random, end - 9);
    const length = 1 + int(random, 24);
    const to = 9 + int(random, end - 9);
    file.copyWithin(to, from, Math.min(end - 1, from + length));
    return file;
  },
  'edit header fields': (file, random) => {
    // Structural edits that keep the JSON valid and the length field right, to reach deep checks.
    const end = headerEnd(file);
    const header = JSON.parse(new TextDecoder().decode(file.subarray(8, end))) as Record<string, Record<string, unknown>>;
    const names = Object.keys(header).filter((key) => key !== '__metadata__');
    const entry = header[names[int(random, names.length)]!]!;
    const offsets = entry.data_offsets as number[];
    const weird = [-1, 2.5, 2 ** 53, 2 ** 60, '3', null, 1e308, 0, 7];
    switch (int(random, 5)) {
      case 0: {
        const delta = [1, 2, 4, 64, -2, 1 << 20, end][int(random, 7)]!;
        entry.data_offsets = [offsets[0]! + delta, offsets[1]! + delta];
        break;
      }
      case 1:
        entry.dtype = ['F64', 'I8', 'U8', 'BOOL', 'F8_E5M2', 'f32', 'F16', 'BF16', 'F32'][int(random, 9)];
        break;
      case 2:
        entry.shape = [...(entry.shape as unknown[]), weird[int(random, weird.length)]];
        break;
      case 3:
        entry.data_offsets = [weird[int(random, weird.length)], offsets[1]];
        break;
      default:
        entry.shape = [3, 1 << 30, 1 << 30, 1 << 30];
    }
    return assembleSafetensors(JSON.stringify(header), file.subarray(end));
  },
};

describe('mutated safetensors files', () => {
  it('fail only with ModelFileError, and parse into readable tensors otherwise (2,700 cases)', () => {
    const outcomes = new Map<string, number>();
    const perMutator = new Map<string, number>();
    let slowest = 0;
    let cases = 0;
    let seed = 1000;
    for (const [name, mutate] of Object.entries(MUTATORS)) {
      for (let i = 0; i < 300; i++, seed++) {
        const random = seededRandom(seed);
        const mutated = mutate(validFile(random).slice(), random);
        const started = performance.now();
        let outcome = 'ok';
        try {
          const parsed = parseSafetensors(mutated, `mutant-${seed}.safetensors`);
          for (const view of parsed.tensors.values()) {
            const bytes = view.bytes();
            if (bytes.length !== view.elements * DTYPE_BYTES[view.dtype as SafetensorsDType]) throw new Error(`seed ${seed}: ${view.name} has ${bytes.length} bytes`);
            if (view.toFloat32().length !== view.elements) throw new Error(`seed ${seed}: ${view.name} widened to the wrong length`);
            if (view.shape.reduce((a, b) => a * b, 1) !== view.elements) throw new Error(`seed ${seed}: ${view.name} elements disagree with shape`);
          }
        } catch (error) {
          if (!(error instanceof ModelFileError)) throw new Error(`seed ${seed} (${name}): not a ModelFileError: ${String(error)}`, { cause: error });
          outcome = error.code;
        }
        slowest = Math.max(slowest, performance.now() - started);
        outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
        if (outcome === 'ok') perMutator.set(name, (perMutator.get(name) ?? 0) + 1);
        cases++;
      }
    }
    console.log(`safetensors mutations: ${cases} cases, slowest ${slowest.toFixed(2)} ms`);
    console.log([...outcomes].sort((a, b) => b[1] - a[1]).map(([code, n]) => `  ${code.padEnd(28)} ${n}`).join('\n'));
    console.log(`  successes by mutator: ${[...perMutator].map(([k, v]) => `${k} ${v}`).join(', ')}`);
    expect(cases).toBeGreaterThanOrEqual(2000);
    expect(slowest).toBeLessThan(100);
    // The mutators must reach the deep checks, not only the JSON parser.
    for (const code of ['MODEL_BAD_HEADER', 'MODEL_TRUNCATED', 'MODEL_ABSURD_COUNT', 'MODEL_TENSOR_OUT_OF_BOUNDS', 'MODEL_UNKNOWN_TENSOR_TYPE', 'MODEL_DIMENSION_OVERFLOW']) {
      expect(outcomes.get(code) ?? 0, code).toBeGreaterThan(0);
    }
  });
});

describe('mutated config.json', () => {
  it('fail only with ModelFileError (600 cases)', () => {
    const outcomes = new Map<string, number>();
    const families = ['llama', 'mistral', 'qwen2', 'opt'] as const;
    for (let seed = 0; seed < 600; seed++) {
      const random = seededRandom(seed + 50_000);
      const text = JSON.stringify(baseConfig(families[seed % 4]!, random() < 0.5));
      const chars = [...text];
      for (let n = 1 + int(random, 3); n > 0; n--) {
        const at = int(random, chars.length);
        const op = int(random, 3);
        if (op === 0) chars[at] = JSON_CHARS[int(random, JSON_CHARS.length)]!;
        else if (op === 1) chars.splice(at, 1 + int(random, 6));
        else chars[at] = String(int(random, 10));
      }
      let outcome = 'ok';
      try {
        parseHfConfig(chars.join(''));
      } catch (error) {
        if (!(error instanceof ModelFileError)) throw new Error(`seed ${seed}: not a ModelFileError: ${String(error)}`, { cause: error });
        outcome = error.code;
      }
      outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
    }
    console.log(`config.json mutations: 600 cases\n${[...outcomes].sort((a, b) => b[1] - a[1]).map(([code, n]) => `  ${code.padEnd(32)} ${n}`).join('\n')}`);
    expect(outcomes.size).toBeGreaterThan(2);
  });
});
