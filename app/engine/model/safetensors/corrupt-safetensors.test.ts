// The corrupt table: deliberately broken safetensors files and Hugging Face folders, each expected
// to fail with a ModelFileError of one specific code and a message that names the problem.
// File-level cases are crossed with several seeds (different tensor counts, shapes and dtypes).
import { mkdirSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ModelFileError, type ErrorCode } from '../../../common/errors.ts';
import { makeTempDir, writeTestFolder, type TestFolderOptions } from '../hf/hf-test-folder.ts';
import { loadHfModel } from '../hf/load.ts';
import type { SafetensorsDType } from './dtype.ts';
import { parseSafetensors } from './parse.ts';
import { assembleSafetensors, encodeSafetensors, encodeValues, randomValues, seededRandom, type WriterTensor } from './safetensors-test-writer.ts';

type Header = Record<string, { dtype: string; shape: unknown[]; data_offsets: unknown[] } | Record<string, unknown>>;
interface Base {
  header: Header;
  data: Uint8Array;
  names: string[];
}

/** 2–5 tensors of seeded shapes and dtypes, laid out back to back. */
function base(seed: number): Base {
  const random = seededRandom(seed);
  const dtypes: SafetensorsDType[] = ['F32', 'F16', 'BF16'];
  const header: Header = { __metadata__: { format: 'pt' } };
  const chunks: Uint8Array[] = [];
  const names: string[] = [];
  let offset = 0;
  const count = 2 + Math.floor(random() * 4);
  for (let i = 0; i < count; i++) {
    const shape = [1 + Math.floor(random() * 5), 1 + Math.floor(random() * 7)];
    const dtype = dtypes[Math.floor(random() * 3)]!;
    const bytes = encodeValues(dtype, randomValues(random, shape[0]! * shape[1]!));
    const name = `layer.${i}.weight`;
    header[name] = { dtype, shape, data_offsets: [offset, offset + bytes.length] };
    names.push(name);
    chunks.push(bytes);
    offset += bytes.length;
  }
  const data = new Uint8Array(offset);
  let at = 0;
  for (const chunk of chunks) {
    data.set(chunk, at);
    at += chunk.length;
  }
  return { header, data, names };
}

const build = (b: Base, header: Header | string = b.header, headerLength?: bigint): Uint8Array =>
  assembleSafetensors(typeof header === 'string' ? header : JSON.stringify(header), b.data, headerLength);
const entry = (b: Base, i: number): { dtype: string; shape: unknown[]; data_offsets: unknown[] } =>
  b.header[b.names[i]!] as { dtype: string; shape: unknown[]; data_offsets: unknown[] };

interface FileCase {
  name: string;
  code: ErrorCode;
  message: RegExp;
  make(b: Base): Uint8Array;
}

const FILE_CASES: FileCase[] = [
  { name: 'file shorter than the length field', code: 'MODEL_TRUNCATED', message: /too short/, make: (b) => build(b).subarray(0, 5) },
  { name: 'header length larger than the file', code: 'MODEL_ABSURD_COUNT', message: /header length \d+ is larger than the \d+-byte file/, make: (b) => build(b, b.header, BigInt(build(b).length)) },
  { name: 'header length absurd (2^62)', code: 'MODEL_ABSURD_COUNT', message: /header length 4611686018427387904/, make: (b) => build(b, b.header, 2n ** 62n) },
  { name: 'header length 2^64-1', code: 'MODEL_ABSURD_COUNT', message: /header length 18446744073709551615/, make: (b) => build(b, b.header, 2n ** 64n - 1n) },
  { name: 'header not JSON', code: 'MODEL_BAD_HEADER', message: /not valid JSON/, make: (b) => build(b, JSON.stringify(b.header).slice(0, -3)) },
  { name: 'header is a JSON array', code: 'MODEL_BAD_HEADER', message: /must be a JSON object, found an array/, make: (b) => build(b, '[1,2,3]') },
  { name: 'header is JSON null', code: 'MODEL_BAD_HEADER', message: /must be a JSON object, found null/, make: (b) => build(b, 'null') },
  {
    name: 'header is not UTF-8',
    code: 'MODEL_BAD_HEADER',
    message: /not valid UTF-8/,
    make: (b) => {
      const file = build(b);
      file[9] = 0xff;
      return file;
    },
  },
  ...['I8', 'F64', 'F8_E4M3', 'Q4_0'].map((dtype): FileCase => ({
    name: `dtype ${dtype}`,
    code: 'MODEL_UNKNOWN_TENSOR_TYPE',
    message: new RegExp(`element type '${dtype}'`),
    make: (b) => build(b, { ...b.header, [b.names[0]!]: { ...entry(b, 0), dtype } }),
  })),
  { name: 'dtype not a string', code: 'MODEL_BAD_HEADER', message: /no dtype string/, make: (b) => build(b, { ...b.header, [b.names[0]!]: { ...entry(b, 0), dtype: 4 } }) },
  {
    name: 'shape × dtype ≠ byte span (header lies about sizes)',
    code: 'MODEL_BAD_HEADER',
    message: /needs \d+ bytes but data_offsets \[\d+, \d+\) span \d+/,
    make: (b) => {
      const e = entry(b, 1);
      return build(b, { ...b.header, [b.names[1]!]: { ...e, shape: [(e.shape[0] as number) + 1, e.shape[1]] } });
    },
  },
  {
    name: 'offsets past the end of the data section',
    code: 'MODEL_TENSOR_OUT_OF_BOUNDS',
    message: /occupies data bytes \[\d+, \d+\) but the data section is \d+ bytes/,
    make: (b) => {
      const e = entry(b, 0);
      const size = (e.data_offsets[1] as number) - (e.data_offsets[0] as number);
      return build(b, { ...b.header, [b.names[0]!]: { ...e, data_offsets: [b.data.length + 16, b.data.length + 16 + size] } });
    },
  },
  { name: 'offsets past 2^53', code: 'MODEL_TENSOR_OUT_OF_BOUNDS', message: /past 2\^53/, make: (b) => build(b, `{"t":{"dtype":"F32","shape":[1],"data_offsets":[18014398509481984,18014398509481988]}}`) },
  {
    name: 'begin > end',
    code: 'MODEL_BAD_HEADER',
    message: /begin \d+ is after end \d+/,
    make: (b) => {
      const e = entry(b, 1);
      return build(b, { ...b.header, [b.names[1]!]: { ...e, data_offsets: [e.data_offsets[1], e.data_offsets[0]] } });
    },
  },
  {
    name: 'overlapping tensors',
    code: 'MODEL_BAD_HEADER',
    message: /and '.*' \[\d+, \d+\) overlap/,
    make: (b) => {
      const e0 = entry(b, 0);
      const e1 = entry(b, 1);
      const size = (e1.data_offsets[1] as number) - (e1.data_offsets[0] as number);
      const begin = (e0.data_offsets[1] as number) - 2;
      return build(b, { ...b.header, [b.names[1]!]: { ...e1, data_offsets: [begin, begin + size] } });
    },
  },
  {
    name: 'duplicate tensor name in the header',
    code: 'MODEL_DUPLICATE_KEY',
    message: /names 'layer\.0\.weight' twice/,
    make: (b) => {
      const text = JSON.stringify(b.header);
      return build(b, `${text.slice(0, -1)},"layer.0.weight":${JSON.stringify(entry(b, 0))}}`);
    },
  },
  {
    name: 'duplicate key inside an entry',
    code: 'MODEL_DUPLICATE_KEY',
    message: /names 'dtype' twice inside 'layer\.0\.weight'/,
    make: (b) => build(b, JSON.stringify(b.header).replace('"dtype":', '"dtype":"F32","dtype":')),
  },
  { name: 'truncated inside the header', code: 'MODEL_ABSURD_COUNT', message: /larger than/, make: (b) => build(b).subarray(0, 8 + 10) },
  { name: 'truncated at the start of the data', code: 'MODEL_TRUNCATED', message: /file ends \d+ bytes early/, make: (b) => { const f = build(b); return f.subarray(0, f.length - b.data.length); } },
  { name: 'truncated mid-data', code: 'MODEL_TRUNCATED', message: /declares \d+ bytes of tensor data, the file holds \d+/, make: (b) => { const f = build(b); return f.subarray(0, f.length - Math.ceil(b.data.length / 2)); } },
  { name: 'truncated by one byte', code: 'MODEL_TRUNCATED', message: /file ends 1 bytes early/, make: (b) => { const f = build(b); return f.subarray(0, f.length - 1); } },
  { name: 'negative dimension', code: 'MODEL_BAD_HEADER', message: /dimension 0 is -3, not a non-negative integer/, make: (b) => build(b, { ...b.header, [b.names[0]!]: { ...entry(b, 0), shape: [-3, 2] } }) },
  { name: 'fractional dimension', code: 'MODEL_BAD_HEADER', message: /dimension 1 is 2\.5/, make: (b) => build(b, { ...b.header, [b.names[0]!]: { ...entry(b, 0), shape: [2, 2.5] } }) },
  { name: 'string dimension', code: 'MODEL_BAD_HEADER', message: /dimension 0 is the string "4"/, make: (b) => build(b, { ...b.header, [b.names[0]!]: { ...entry(b, 0), shape: ['4'] } }) },
  { name: 'shape not an array', code: 'MODEL_BAD_HEADER', message: /no shape array/, make: (b) => build(b, { ...b.header, [b.names[0]!]: { ...entry(b, 0), shape: 4 } }) },
  {
    name: 'dimension product overflow',
    code: 'MODEL_DIMENSION_OVERFLOW',
    message: /holds \d+ bytes, past 2\^53/,
    make: (b) => build(b, { ...b.header, [b.names[0]!]: { ...entry(b, 0), shape: [4294967296, 4294967296, 16] } }),
  },
  { name: 'dimension past 2^53', code: 'MODEL_DIMENSION_OVERFLOW', message: /dimension 0 is .* past 2\^53/, make: (b) => build(b, `{"t":{"dtype":"F32","shape":[18014398509481984],"data_offsets":[0,4]}}`) },
  { name: 'data_offsets missing', code: 'MODEL_BAD_HEADER', message: /data_offsets must be \[begin, end\]/, make: (b) => build(b, { ...b.header, [b.names[0]!]: { dtype: 'F32', shape: [1] } }) },
  { name: 'negative offset', code: 'MODEL_BAD_HEADER', message: /data_offsets begin is -4/, make: (b) => build(b, { ...b.header, [b.names[0]!]: { ...entry(b, 0), data_offsets: [-4, 0] } }) },
  { name: 'tensor entry not an object', code: 'MODEL_BAD_HEADER', message: /must be an object with dtype/, make: (b) => build(b, { ...b.header, [b.names[0]!]: [1] as unknown as Record<string, unknown> }) },
  { name: '__metadata__ value not a string', code: 'MODEL_BAD_HEADER', message: /__metadata__\.format must be a string/, make: (b) => build(b, { ...b.header, __metadata__: { format: 1 } }) },
  { name: 'empty tensor name', code: 'MODEL_BAD_HEADER', message: /empty name/, make: (b) => build(b, { ...b.header, '': entry(b, 0) }) },
];

function expectModelError(fn: () => unknown, code: ErrorCode, message: RegExp): ModelFileError {
  let thrown: unknown;
  try {
    fn();
  } catch (error) {
    thrown = error;
  }
  expect(thrown, 'expected a ModelFileError').toBeInstanceOf(ModelFileError);
  const error = thrown as ModelFileError;
  expect(error.code, error.message).toBe(code);
  expect(error.message).toMatch(message);
  return error;
}

describe('corrupt safetensors files', () => {
  const seeds = [1, 2, 3, 4];
  for (const kase of FILE_CASES) {
    it(`${kase.name} → ${kase.code}`, () => {
      for (const seed of seeds) {
        const b = base(seed);
        expect(() => parseSafetensors(build(b), 'ok.safetensors')).not.toThrow();
        const error = expectModelError(() => parseSafetensors(kase.make(b), 'bad.safetensors'), kase.code, kase.message);
        expect(error.message.startsWith('bad.safetensors: ')).toBe(true);
      }
    });
  }

  it('header over 100 MB in a file large enough to hold it → MODEL_BAD_HEADER', () => {
    const file = new Uint8Array(100_000_016);
    new DataView(file.buffer).setBigUint64(0, 100_000_001n, true);
    expectModelError(() => parseSafetensors(file, 'big.safetensors'), 'MODEL_BAD_HEADER', /exceeds the 100000000-byte limit/);
  });
});

// ---- folders ------------------------------------------------------------------------------

const root = makeTempDir('longhand-corrupt-');
let counter = 0;
afterAll(() => rmSync(root, { recursive: true, force: true }));

interface FolderCase {
  name: string;
  code: ErrorCode;
  message: RegExp;
  options?: Partial<TestFolderOptions>;
  /** Break the written folder. */
  after?: (folder: string, files: string[]) => void;
}

const readText = (path: string): string => readFileSync(path, 'utf8');
const rewriteIndex = (folder: string, edit: (map: Record<string, string>) => void): void => {
  const path = join(folder, 'model.safetensors.index.json');
  const index = JSON.parse(readText(path)) as { weight_map: Record<string, string> };
  edit(index.weight_map);
  writeFileSync(path, JSON.stringify(index));
};

const FOLDER_CASES: FolderCase[] = [
  { name: 'index names a missing shard', code: 'MODEL_NOT_FOUND', message: /model-00002-of-00003\.safetensors: shard named by model\.safetensors\.index\.json is missing/, options: { shards: 3 }, after: (f, files) => unlinkSync(join(f, files[1]!)) },
  { name: 'index path escapes the folder (../)', code: 'MODEL_BAD_HEADER', message: /shard name '\.\.\/outside\.safetensors' points outside/, options: { shards: 2 }, after: (f) => rewriteIndex(f, (m) => { m['model.norm.weight'] = '../outside.safetensors'; }) },
  { name: 'index path is absolute', code: 'MODEL_BAD_HEADER', message: /shard name '\/etc\/passwd' points outside/, options: { shards: 2 }, after: (f) => rewriteIndex(f, (m) => { m['model.norm.weight'] = '/etc/passwd'; }) },
  { name: 'index path sneaks out through a subfolder', code: 'MODEL_BAD_HEADER', message: /points outside/, options: { shards: 2 }, after: (f) => rewriteIndex(f, (m) => { m['model.norm.weight'] = 'sub/../../x.safetensors'; }) },
  { name: 'index not JSON', code: 'MODEL_BAD_HEADER', message: /index\.json: is not valid JSON/, options: { shards: 2 }, after: (f) => writeFileSync(join(f, 'model.safetensors.index.json'), '{"weight_map": {') },
  { name: 'index without weight_map', code: 'MODEL_BAD_HEADER', message: /weight_map object/, options: { shards: 2 }, after: (f) => writeFileSync(join(f, 'model.safetensors.index.json'), '{"metadata": {}}') },
  {
    name: 'index names a tensor twice',
    code: 'MODEL_DUPLICATE_KEY',
    message: /names 'model\.norm\.weight' twice/,
    options: { shards: 2 },
    after: (f) => {
      const path = join(f, 'model.safetensors.index.json');
      writeFileSync(path, readText(path).replace('"model.norm.weight"', '"model.norm.weight": "model-00001-of-00002.safetensors",\n"model.norm.weight"'));
    },
  },
  {
    name: 'tensor stored in two shards',
    code: 'MODEL_DUPLICATE_KEY',
    message: /tensor 'model\.embed_tokens\.weight' is also stored in model-00001-of-00002\.safetensors/,
    options: { shards: 2 },
    after: (f, files) => {
      const embed: WriterTensor = { name: 'model.embed_tokens.weight', dtype: 'F32', shape: [32, 16], values: new Float32Array(512) };
      const other: WriterTensor = { name: 'model.norm.weight', dtype: 'F32', shape: [16], values: new Float32Array(16) };
      writeFileSync(join(f, files[1]!), encodeSafetensors([other, embed]));
    },
  },
  { name: 'weight_map puts a tensor in the wrong shard', code: 'MODEL_MISSING_TENSOR', message: /puts tensor 'model\.norm\.weight' in model-00001-of-00002\.safetensors, but it is stored in model-00002/, options: { shards: 2 }, after: (f) => rewriteIndex(f, (m) => { m['model.norm.weight'] = 'model-00001-of-00002.safetensors'; }) },
  { name: 'weight_map names a tensor no shard holds', code: 'MODEL_MISSING_TENSOR', message: /'model\.ghost\.weight' in model-00001-of-00002\.safetensors, which does not hold it/, options: { shards: 2 }, after: (f) => rewriteIndex(f, (m) => { m['model.ghost.weight'] = 'model-00001-of-00002.safetensors'; }) },
  {
    name: 'a corrupt shard is named in the error',
    code: 'MODEL_TRUNCATED',
    message: /^model-00002-of-00003\.safetensors: file ends/,
    options: { shards: 3 },
    after: (f, files) => {
      const path = join(f, files[1]!);
      writeFileSync(path, readFileSync(path).subarray(0, -7));
    },
  },
  { name: 'config.json broken', code: 'MODEL_BAD_HEADER', message: /config\.json: is not valid JSON/, after: (f) => writeFileSync(join(f, 'config.json'), '{"hidden_size": 16,,}') },
  { name: 'config.json is an array', code: 'MODEL_BAD_HEADER', message: /config\.json: must be a JSON object/, after: (f) => writeFileSync(join(f, 'config.json'), '[]') },
  { name: 'config.json missing', code: 'MODEL_NOT_FOUND', message: /config\.json: is missing/, after: (f) => unlinkSync(join(f, 'config.json')) },
  { name: 'config missing hidden_size', code: 'MODEL_MISSING_METADATA', message: /config\.json: has no hidden_size/, options: { config: { hidden_size: undefined } } },
  { name: 'config missing intermediate_size', code: 'MODEL_MISSING_METADATA', message: /has no intermediate_size/, options: { config: { intermediate_size: undefined } } },
  { name: 'OPT config missing ffn_dim', code: 'MODEL_MISSING_METADATA', message: /has no ffn_dim/, options: { family: 'opt', config: { ffn_dim: undefined } } },
  { name: 'unsupported architecture', code: 'MODEL_UNSUPPORTED_ARCHITECTURE', message: /architecture GPT2LMHeadModel is not supported/, options: { config: { architectures: ['GPT2LMHeadModel'] } } },
  { name: 'post-LayerNorm OPT', code: 'MODEL_UNSUPPORTED_ARCHITECTURE', message: /do_layer_norm_before: false/, options: { family: 'opt', config: { do_layer_norm_before: false } } },
  { name: 'OPT with project_in/out', code: 'MODEL_UNSUPPORTED_ARCHITECTURE', message: /word_embed_proj_dim 8 differs from hidden_size 16/, options: { family: 'opt', config: { word_embed_proj_dim: 8 } } },
  { name: 'missing tensor', code: 'MODEL_MISSING_TENSOR', message: /tensor blk\.1\.ffn_down\.weight is missing/, options: { editTensors: (ts) => ts.filter((t) => t.name !== 'model.layers.1.mlp.down_proj.weight') } },
  { name: 'missing lm_head when not tied', code: 'MODEL_MISSING_TENSOR', message: /tensor output\.weight is missing/, options: { editTensors: (ts) => ts.filter((t) => t.name !== 'lm_head.weight') } },
  { name: 'qwen2 without q bias', code: 'MODEL_MISSING_TENSOR', message: /blk\.0\.attn_q\.bias is missing/, options: { family: 'qwen2', editTensors: (ts) => ts.filter((t) => t.name !== 'model.layers.0.self_attn.q_proj.bias') } },
  { name: 'OPT missing a layer norm bias', code: 'MODEL_MISSING_TENSOR', message: /blk\.0\.attn_norm\.bias is missing/, options: { family: 'opt', editTensors: (ts) => ts.filter((t) => t.name !== 'model.decoder.layers.0.self_attn_layer_norm.bias') } },
  {
    name: 'wrong shape (k_proj sized for MHA in a GQA model)',
    code: 'MODEL_SHAPE_MISMATCH',
    message: /blk\.0\.attn_k\.weight has shape \[16, 16\], expected \[8, 16\]/,
    options: { editTensors: (ts) => ts.map((t) => (t.name === 'model.layers.0.self_attn.k_proj.weight' ? { ...t, shape: [16, 16], values: new Float32Array(256) } : t)) },
  },
  {
    name: 'embedding rows disagree with vocab_size',
    code: 'MODEL_SHAPE_MISMATCH',
    message: /token_embd\.weight has shape \[32, 16\], expected \[40, 16\]/,
    options: { config: { vocab_size: 40 } },
  },
  {
    name: 'OPT positions without the offset of 2',
    code: 'MODEL_SHAPE_MISMATCH',
    message: /position_embd\.weight has shape \[64, 16\], expected \[66, 16\]/,
    options: { family: 'opt', editTensors: (ts) => ts.map((t) => (t.name.endsWith('embed_positions.weight') ? { ...t, shape: [64, 16], values: new Float32Array(64 * 16) } : t)) },
  },
  {
    name: 'two HF names for one canonical tensor',
    code: 'MODEL_DUPLICATE_KEY',
    message: /'model\.norm\.weight' and 'norm\.weight' are both output_norm\.weight/,
    options: { editTensors: (ts) => [...ts, { name: 'norm.weight', dtype: 'F32', shape: [16], values: new Float32Array(16) }] },
  },
  { name: 'tokenizer.json missing', code: 'MODEL_NOT_FOUND', message: /tokenizer\.json: is missing/, options: { tokenizer: false } },
  { name: 'no weights at all', code: 'MODEL_NOT_FOUND', message: /no model\.safetensors or model\.safetensors\.index\.json/, after: (f) => unlinkSync(join(f, 'model.safetensors')) },
  { name: 'chat_template of the wrong type', code: 'CHAT_TEMPLATE_INVALID', message: /chat_template must be a string/, options: { tokenizerConfig: { chat_template: 42 } } },
];

describe('corrupt Hugging Face folders', () => {
  for (const kase of FOLDER_CASES) {
    it(`${kase.name} → ${kase.code}`, () => {
      const folder = join(root, String(counter++));
      mkdirSync(folder);
      const written = writeTestFolder({ family: 'llama', ...kase.options }, folder);
      kase.after?.(folder, written.files);
      expectModelError(() => loadHfModel(folder).close(), kase.code, kase.message);
    });
  }

  it('the same folders load when not broken (control)', () => {
    for (const shards of [1, 2, 3]) {
      const model = loadHfModel(writeTestFolder({ family: 'llama', shards }, join(root, `ok-${shards}`)).folder);
      expect(model.tensors.size).toBeGreaterThan(0);
      model.close();
    }
  });
});
