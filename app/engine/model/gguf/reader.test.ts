// GGUF parsing: every metadata value type round-trips through the test builder (v2 and v3),
// tensor directory and views, and the real stories260K model.
import { describe, expect, it } from 'vitest';
import { ModelFileError } from '../../../common/errors.ts';
import { haveSharedModel, STORIES_260K } from '../../../../test/support/models.ts';
import { bv, buildGguf, tinyLlama, type BValue } from './gguf-test-builder.ts';
import { ggufToLoadedModel, loadGgufModel } from './gguf-model.ts';
import { openGguf } from './open-gguf.ts';
import { parseGguf } from './reader.ts';

const ALL_SCALARS: [string, BValue, unknown][] = [
  ['a.u8', bv.u8(255), 255],
  ['a.i8', bv.i8(-128), -128],
  ['a.u16', bv.u16(65535), 65535],
  ['a.i16', bv.i16(-32768), -32768],
  ['a.u32', bv.u32(4294967295), 4294967295],
  ['a.i32', bv.i32(-2147483648), -2147483648],
  ['a.f32', bv.f32(0.1), Math.fround(0.1)],
  ['a.f64', bv.f64(0.1), 0.1],
  ['a.u64', bv.u64(18446744073709551615n), 18446744073709551615n],
  ['a.i64', bv.i64(-9223372036854775808n), -9223372036854775808n],
  ['a.true', bv.bool(true), true],
  ['a.false', bv.bool(false), false],
  ['a.str', bv.str('héllo ▁wörld 🙂'), 'héllo ▁wörld 🙂'],
  ['a.empty', bv.str(''), ''],
  ['a.bom', bv.str('\uFEFFbom'), '\uFEFFbom'],
];

describe('metadata round trip', () => {
  for (const version of [2, 3]) {
    it(`reads every scalar type (v${version})`, () => {
      const { bytes } = buildGguf(ALL_SCALARS.map(([k, v]) => [k, v]), [], { version });
      const file = parseGguf(bytes, 'scalars.gguf');
      expect(file.version).toBe(version);
      expect(file.tensors.size).toBe(0);
      for (const [key, value, expected] of ALL_SCALARS) {
        expect(file.metadata.get(key), key).toEqual(expected);
        expect(file.metadataTypes.get(key)?.type).toBe(value.type);
      }
    });
  }

  it('reads arrays of every item type, empty and nested arrays', () => {
    const { bytes } = buildGguf([
      ['u8', bv.arr('uint8', [bv.u8(1), bv.u8(255)])],
      ['i8', bv.arr('int8', [bv.i8(-1), bv.i8(127)])],
      ['u16', bv.arr('uint16', [bv.u16(65535)])],
      ['i16', bv.arr('int16', [bv.i16(-2)])],
      ['u32', bv.arr('uint32', [bv.u32(7), bv.u32(4000000000)])],
      ['i32', bv.arr('int32', [bv.i32(-7)])],
      ['f32', bv.arr('float32', [bv.f32(1.5), bv.f32(-2)])],
      ['f64', bv.arr('float64', [bv.f64(Math.PI)])],
      ['u64', bv.arr('uint64', [bv.u64(2n ** 63n)])],
      ['i64', bv.arr('int64', [bv.i64(-5n)])],
      ['bool', bv.arr('bool', [bv.bool(true), bv.bool(false)])],
      ['str', bv.arr('string', [bv.str('a'), bv.str(''), bv.str('日本')])],
      ['empty', bv.arr('uint32', [])],
      ['nested', bv.arr('array', [bv.arr('string', [bv.str('x')]), bv.arr('int32', [bv.i32(1), bv.i32(2)]), bv.arr('array', [bv.arr('bool', [bv.bool(true)])])])],
    ]);
    const m = parseGguf(bytes, 'arrays.gguf').metadata;
    expect(m.get('u8')).toEqual(new Uint8Array([1, 255]));
    expect(m.get('i8')).toEqual(new Int8Array([-1, 127]));
    expect(m.get('u16')).toEqual(new Uint16Array([65535]));
    expect(m.get('i16')).toEqual(new Int16Array([-2]));
    expect(m.get('u32')).toEqual(new Uint32Array([7, 4000000000]));
    expect(m.get('i32')).toEqual(new Int32Array([-7]));
    expect(m.get('f32')).toEqual(new Float32Array([1.5, -2]));
    expect(m.get('f64')).toEqual(new Float64Array([Math.PI]));
    expect(m.get('u64')).toEqual(new BigUint64Array([2n ** 63n]));
    expect(m.get('i64')).toEqual(new BigInt64Array([-5n]));
    expect(m.get('bool')).toEqual([true, false]);
    expect(m.get('str')).toEqual(['a', '', '日本']);
    expect(m.get('empty')).toEqual(new Uint32Array(0));
    expect(m.get('nested')).toEqual([['x'], new Int32Array([1, 2]), [[true]]]);
  });

  it('honours general.alignment', () => {
    const { bytes, layout } = buildGguf([['general.alignment', bv.u32(64)]], [{ name: 'w', ne: [3], type: 0, data: new Uint8Array(new Float32Array([1, 2, 3]).buffer) }]);
    const file = parseGguf(bytes, 'aligned.gguf');
    expect(file.alignment).toBe(64);
    expect(file.dataOffset % 64).toBe(0);
    expect(file.dataOffset).toBe(layout.dataOffset);
    expect(Array.from(file.tensorView('w').toFloat32())).toEqual([1, 2, 3]);
  });
});

describe('tensor directory and views', () => {
  it('reverses ne into shape, views bytes without copying and dequantises', () => {
    const { kvs, tensors } = tinyLlama({ types: { 'ffn_up.weight': 'Q8_0', 'ffn_gate.weight': 'Q4_K' }, hidden: 256, heads: 8, ffn: 32 });
    const { bytes } = buildGguf(kvs, tensors);
    const file = parseGguf(bytes, 'tiny.gguf');
    const up = file.tensors.get('blk.0.ffn_up.weight');
    expect(up?.ne).toEqual([256, 32]);
    expect(up?.shape).toEqual([32, 256]);
    expect(up?.typeName).toBe('Q8_0');
    const view = file.tensorView('blk.0.ffn_up.weight');
    expect(view.bytes().buffer).toBe(bytes.buffer);
    expect(view.bytes().byteOffset).toBe(up?.absoluteOffset);
    expect(view.bytes().length).toBe((32 * 256 / 32) * 34);
    expect(view.toFloat32().length).toBe(32 * 256);
    expect(file.tensorView('blk.1.ffn_gate.weight').dtype).toBe('Q4_K');
    expect(() => file.tensorView('nope')).toThrow(expect.objectContaining({ code: 'MODEL_MISSING_TENSOR' }));
  });

  it('lists unsupported types only when asked, and refuses their views', () => {
    const { bytes } = buildGguf([], [{ name: 'q2', ne: [256], type: 10 }]);
    expect(() => parseGguf(bytes, 'q2k.gguf')).toThrow(/Q2_K/);
    const file = parseGguf(bytes, 'q2k.gguf', { allowUnsupportedTypes: true });
    expect(file.tensors.get('q2')?.typeName).toBe('Q2_K');
    expect(() => file.tensorView('q2')).toThrow(ModelFileError);
  });
});

describe('tiny models', () => {
  it('loads a llama with hyperparameters from metadata', () => {
    const { kvs, tensors } = tinyLlama();
    const model = ggufToLoadedModel(parseGguf(buildGguf(kvs, tensors).bytes, 'tiny.gguf'));
    expect(model.hyper).toMatchObject({ architecture: 'llama', family: 'llama', hiddenSize: 32, layers: 2, heads: 4, kvHeads: 2, headDim: 8, ffnSize: 64, vocabSize: 16, contextLength: 256, ropeTheta: 10000, ropeLayout: 'interleaved', qkvBias: false, tiedEmbeddings: false });
    expect(model.chatTemplate).toBe('{{ messages }}');
    expect(model.tokenizer.kind).toBe('gguf');
  });

  it('loads qwen2 (neox RoPE, q/k/v bias, tied embeddings, linear scaling, per-layer head counts)', () => {
    const { kvs, tensors } = tinyLlama({ family: 'qwen2', qkvBias: true, tied: true });
    kvs.push(['qwen2.rope.freq_base', bv.f32(1000000)], ['qwen2.rope.scaling.type', bv.str('linear')], ['qwen2.rope.scaling.factor', bv.f32(4)]);
    const at = kvs.findIndex(([k]) => k === 'qwen2.attention.head_count_kv');
    kvs[at] = ['qwen2.attention.head_count_kv', bv.arr('uint32', [bv.u32(2), bv.u32(2)])];
    const model = ggufToLoadedModel(parseGguf(buildGguf(kvs, tensors).bytes, 'qwen.gguf'));
    expect(model.hyper).toMatchObject({ family: 'qwen2', ropeLayout: 'neox', qkvBias: true, tiedEmbeddings: true, ropeTheta: 1000000, kvHeads: 2, ropeScaling: { kind: 'linear', factor: 4 } });
  });

  it('reads Llama 3 scaling from a rope_freqs tensor', () => {
    const { kvs, tensors } = tinyLlama({ hidden: 128, heads: 2, kvHeads: 1 }); // head dim 64
    kvs.push(['llama.rope.freq_base', bv.f32(500000)]);
    const divisors = new Float32Array(32);
    for (let i = 0; i < 32; i++) {
      const wavelength = 2 * Math.PI * 500000 ** ((2 * i) / 64);
      const smooth = (8192 / wavelength - 1) / 3;
      divisors[i] = wavelength < 2048 ? 1 : wavelength > 8192 ? 8 : 1 / ((1 - smooth) / 8 + smooth);
    }
    tensors.push({ name: 'rope_freqs.weight', ne: [32], type: 0, data: new Uint8Array(divisors.buffer) });
    const model = ggufToLoadedModel(parseGguf(buildGguf(kvs, tensors).bytes, 'l3.gguf'));
    expect(model.hyper.ropeScaling).toEqual({ kind: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalContextLength: 8192 });
  });
});

describe.runIf(haveSharedModel())('stories260K.gguf', () => {
  it('parses header, metadata and tensors', () => {
    const file = openGguf(STORIES_260K);
    try {
      expect(file.version).toBe(3);
      expect(file.alignment).toBe(32);
      expect(file.tensors.size).toBe(48);
      expect(file.metadata.get('general.architecture')).toBe('llama');
      expect(file.metadata.get('llama.context_length')).toBe(2048);
      expect((file.metadata.get('tokenizer.ggml.tokens') as string[]).length).toBe(512);
      expect((file.metadata.get('tokenizer.ggml.tokens') as string[]).slice(0, 3)).toEqual(['<unk>', '<s>', '</s>']);
      expect(file.metadata.get('tokenizer.ggml.scores')).toBeInstanceOf(Float32Array);
      const embd = file.tensors.get('token_embd.weight');
      expect(embd).toMatchObject({ ne: [64, 512], shape: [512, 64], typeName: 'F32', offset: 0 });
      expect(file.tensors.get('blk.4.ffn_down.weight')?.shape).toEqual([64, 172]);
      // fp32 values are the raw bytes
      const view = file.tensorView('output_norm.weight');
      const raw = view.bytes();
      expect(view.toFloat32()[3]).toBe(new DataView(raw.buffer, raw.byteOffset).getFloat32(12, true));
    } finally {
      file.close();
    }
  });

  it('loads as a model with the documented hyperparameters', () => {
    const model = loadGgufModel(STORIES_260K);
    try {
      expect(model.hyper).toEqual({
        architecture: 'llama', family: 'llama', hiddenSize: 64, layers: 5, heads: 8, kvHeads: 4, headDim: 8, ffnSize: 172, vocabSize: 512,
        contextLength: 2048, normEps: Math.fround(1e-5), ropeTheta: 10000, ropeLayout: 'interleaved', ropeScaling: undefined, qkvBias: false, tiedEmbeddings: false,
      });
      expect(model.tensors.size).toBe(48);
      expect(model.weightBytes).toBe(1185376 - 14176);
      expect(model.chatTemplate).toBeUndefined();
    } finally {
      model.close();
    }
    expect(() => model.tensors.get('output.weight')?.bytes()).toThrow(/closed/);
  });

  it('names a missing file with MODEL_NOT_FOUND', () => {
    expect(() => openGguf(`${STORIES_260K}.missing`)).toThrow(expect.objectContaining({ code: 'MODEL_NOT_FOUND' }));
  });
});
