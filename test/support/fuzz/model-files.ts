// Fuzz targets for the bench's long run over the model-file readers: GGUF (parse, load, view and
// dequantise), a safetensors file (parse, read every tensor), a sharded checkpoint's
// model.safetensors.index.json (open the checkpoint), and config.json. The mutations are the ones
// mutation-gguf.test.ts and mutation-safetensors.test.ts use (bit flips, bytes set, truncation,
// spans copied or deleted, u64 length fields overwritten, JSON punctuation and digits), restated
// on plain byte arrays here: those suites keep their own inline copies (this module came later and
// is owned separately). Expected: 'ok' or ModelFileError.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ModelFileError } from '../../../app/common/errors.ts';
import { ggufToLoadedModel } from '../../../app/engine/model/gguf/gguf-model.ts';
import { buildGguf, tinyLlama } from '../../../app/engine/model/gguf/gguf-test-builder.ts';
import { parseGguf } from '../../../app/engine/model/gguf/reader.ts';
import { baseConfig, writeTestFolder } from '../../../app/engine/model/hf/hf-test-folder.ts';
import { parseHfConfig } from '../../../app/engine/model/hf/config.ts';
import { INDEX_FILE, openSafetensorsCheckpoint } from '../../../app/engine/model/safetensors/checkpoint.ts';
import { parseSafetensors } from '../../../app/engine/model/safetensors/parse.ts';
import { encodeSafetensors, randomValues, seededRandom as writerRandom } from '../../../app/engine/model/safetensors/safetensors-test-writer.ts';
import { flipBytes, int, pick, shuffleSpan, splice, truncate, type FuzzTarget, type Mutant, type Random } from './core.ts';

const HUGE = [2n ** 63n, 2n ** 64n - 1n, 2n ** 32n, 2n ** 40n, 2n ** 53n, 2n ** 31n - 1n];
const JSON_CHARS = '{}[],:"-.eE+0123456789 \\tnuF';

function mutateBytes(bytes: Uint8Array, random: Random, hot: number): Mutant<Uint8Array> {
  // three quarters of the edits land in the first `hot` bytes (the header, where the parser decides)
  const position = (): number => (random() < 0.75 ? int(random, Math.max(1, hot)) : int(random, bytes.length));
  switch (int(random, 6)) {
    case 0: {
      const b = bytes.slice();
      for (let n = 1 + int(random, 4); n > 0; n--) b[position()]! ^= 1 << int(random, 8);
      return { input: b, what: 'bit flips' };
    }
    case 1: {
      const b = bytes.slice();
      const value = pick(random, [0x00, 0xff, int(random, 256)]);
      const at = position();
      b.fill(value, at, at + 1 + int(random, 8));
      return { input: b, what: `bytes set to ${value} at ${at}` };
    }
    case 2: {
      const n = random() < 0.7 ? int(random, hot + 64) : int(random, bytes.length);
      return { input: bytes.slice(0, n), what: `truncated to ${n}` };
    }
    case 3: {
      const from = position();
      const chunk = bytes.slice(from, from + 1 + int(random, 64));
      const at = position();
      const b = new Uint8Array(bytes.length + chunk.length);
      b.set(bytes.subarray(0, at));
      b.set(chunk, at);
      b.set(bytes.subarray(at), at + chunk.length);
      return { input: b, what: `${chunk.length} bytes from ${from} copied to ${at}` };
    }
    case 4: {
      const at = position();
      const length = 1 + int(random, 64);
      const b = new Uint8Array(Math.max(at, bytes.length - length));
      b.set(bytes.subarray(0, at));
      b.set(bytes.subarray(at + length).subarray(0, b.length - at), at);
      return { input: b, what: `${length} bytes deleted at ${at}` };
    }
    default: {
      const b = bytes.slice();
      const at = random() < 0.5 ? 8 * int(random, Math.max(1, hot >> 3)) : position();
      const value = pick(random, HUGE);
      if (at + 8 <= b.length) new DataView(b.buffer).setBigUint64(at, value, true);
      return { input: b, what: `u64 at ${at} = ${value}` };
    }
  }
}

function modelFileOutcome(run: () => void): string {
  try {
    run();
    return 'ok';
  } catch (error) {
    if (error instanceof ModelFileError) return error.code;
    throw error;
  }
}

export const ggufTarget: FuzzTarget<Uint8Array> = {
  name: 'GGUF',
  seeds: () => {
    const f32 = tinyLlama({ seed: 7 });
    const qwen = tinyLlama({ seed: 9, family: 'qwen2', qkvBias: true, tied: true });
    return [
      { name: 'tiny llama F32 v3', input: buildGguf(f32.kvs, f32.tensors).bytes },
      { name: 'tiny qwen2 v2', input: buildGguf(qwen.kvs, qwen.tensors, { version: 2 }).bytes },
    ];
  },
  mutate: (bytes, random) => mutateBytes(bytes, random, Math.min(bytes.length, 4096)),
  exercise: (bytes) =>
    modelFileOutcome(() => {
      const file = parseGguf(bytes, 'mutant.gguf');
      for (const info of file.tensors.values()) {
        const view = file.tensorView(info.name);
        if (view.bytes().length !== info.byteSize) throw new Error(`view of ${info.name} has the wrong size`);
        if (view.elements <= 1 << 16) view.toFloat32();
      }
      ggufToLoadedModel(file);
    }),
};

export const safetensorsTarget: FuzzTarget<Uint8Array> = {
  name: 'safetensors',
  seeds: () => {
    const random = writerRandom(11);
    const tensors = [
      { name: 'a.weight', dtype: 'F32' as const, shape: [4, 3], values: randomValues(random, 12) },
      { name: 'b.weight', dtype: 'F16' as const, shape: [5], values: randomValues(random, 5) },
      { name: 'c.bias', dtype: 'BF16' as const, shape: [2, 2, 2], values: randomValues(random, 8) },
    ];
    return [
      { name: 'three tensors', input: encodeSafetensors(tensors, { format: 'pt' }) },
      { name: 'one tensor', input: encodeSafetensors(tensors.slice(0, 1)) },
    ];
  },
  mutate(bytes, random) {
    const hot = bytes.length >= 8 ? Math.min(bytes.length, 8 + Number(new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(0, true) & 0xffffn)) : bytes.length;
    if (random() < 0.3 && hot > 9) {
      const b = bytes.slice();
      b[8 + int(random, hot - 8)] = JSON_CHARS.charCodeAt(int(random, JSON_CHARS.length));
      return { input: b, what: 'JSON punctuation in the header' };
    }
    return mutateBytes(bytes, random, hot);
  },
  exercise: (bytes) =>
    modelFileOutcome(() => {
      const parsed = parseSafetensors(bytes, 'mutant.safetensors');
      for (const view of parsed.tensors.values()) if (view.toFloat32().length !== view.elements) throw new Error(`${view.name} widened to the wrong length`);
    }),
};

/** Mutated index texts are written into one sharded checkpoint folder and opened from there. */
export function safetensorsIndexTarget(): FuzzTarget<string> {
  let folder: string | undefined;
  const checkpoint = (): string => {
    folder ??= writeTestFolder({ family: 'llama', shards: 2, tokenizer: false }).folder;
    return folder;
  };
  return {
    name: 'safetensors index',
    // the folder's own index, as writeShards wrote it
    seeds: () => [{ name: 'two shards', input: readFileSync(join(checkpoint(), INDEX_FILE), 'utf8') }],
    mutate(text, random) {
      switch (int(random, 5)) {
        case 0:
          return flipBytes(text, random);
        case 1:
          return truncate(text, random);
        case 2:
          return shuffleSpan(text, random);
        case 3:
          return splice(text, random, pick(random, [...JSON_CHARS, '"../../etc/passwd"', '"model-00002-of-00002.safetensors"', '"/abs.safetensors"', '{}', '[]', 'null', '1e400']), 'JSON splice');
        default: {
          const digits = [...text.matchAll(/\d/g)].map((m) => m.index);
          if (digits.length === 0) return truncate(text, random);
          const at = pick(random, digits);
          return { input: text.slice(0, at) + String(int(random, 10)) + text.slice(at + 1), what: `digit at ${at}` };
        }
      }
    },
    exercise(text) {
      const dir = checkpoint();
      writeFileSync(join(dir, INDEX_FILE), text);
      return modelFileOutcome(() => {
        for (const view of openSafetensorsCheckpoint(dir).tensors.values()) view.bytes();
      });
    },
  };
}

export const configJsonTarget: FuzzTarget<string> = {
  name: 'config.json',
  seeds: () => (['llama', 'mistral', 'qwen2', 'opt'] as const).map((family, i) => ({ name: family, input: JSON.stringify(baseConfig(family, i % 2 === 1)) })),
  mutate(text, random) {
    const op = int(random, 4);
    if (op === 0) return flipBytes(text, random);
    if (op === 1) return shuffleSpan(text, random);
    if (op === 2) return splice(text, random, pick(random, [...JSON_CHARS]), 'JSON punctuation');
    const digits = [...text.matchAll(/\d/g)].map((m) => m.index);
    if (digits.length === 0) return truncate(text, random);
    const at = pick(random, digits);
    return { input: text.slice(0, at) + pick(random, ['0', '9', '99999999999', '-1', '1e308', '0.5']) + text.slice(at + 1), what: `number edit at ${at}` };
  },
  exercise: (text) => modelFileOutcome(() => parseHfConfig(text)),
};
