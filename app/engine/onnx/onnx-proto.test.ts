import * as ort from 'onnxruntime-node';
import { describe, expect, it } from 'vitest';

import { bytesOf, encodeModel, ProtoWriter, type ModelSpec } from './onnx-proto.ts';

const NO_SPIN = { extra: { session: { intra_op: { allow_spinning: '0' } } }, intraOpNumThreads: 1 };

describe('ProtoWriter', () => {
  it('writes varints as protobuf does', () => {
    const w = new ProtoWriter();
    w.varint(0);
    w.varint(1);
    w.varint(300); // 0xac 0x02
    w.varint(2 ** 35);
    w.varint(-1n); // int64 -1: ten bytes
    expect([...w.finish()]).toEqual([0x00, 0x01, 0xac, 0x02, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
  });

  it('length-prefixes nested messages and keeps large byte fields intact', () => {
    const big = new Uint8Array(1000).map((_, i) => i & 0xff);
    const w = new ProtoWriter();
    w.messageField(3, (inner) => {
      inner.stringField(1, 'ab');
      inner.bytesField(2, big);
    });
    const out = w.finish();
    // tag(3, LEN)=0x1a, length 4 + 3 + 1000 = 1007 = 0xef 0x07
    expect([...out.subarray(0, 3)]).toEqual([0x1a, 0xef, 0x07]);
    expect([...out.subarray(3, 7)]).toEqual([0x0a, 0x02, 0x61, 0x62]);
    expect([...out.subarray(7, 10)]).toEqual([0x12, 0xe8, 0x07]);
    expect(out.subarray(10)).toEqual(big);
  });
});

describe('encodeModel', () => {
  it('encodes Add and MatMul that onnxruntime runs with exact results', async () => {
    // y = (x + b) @ W with x: [batch, 3], b: [3], W: [3, 2]; all values small integers, so exact.
    const b = new Float32Array([1, 2, 3]);
    const W = new Float32Array([1, 0, 0, 1, 2, -1]); // rows: [1,0] [0,1] [2,-1]
    const model: ModelSpec = {
      irVersion: 10,
      opsetImports: [
        { domain: '', version: 21 },
        { domain: 'com.microsoft', version: 1 },
      ],
      producerName: 'longhand-test',
      graph: {
        name: 'tiny',
        nodes: [
          { opType: 'Add', inputs: ['x', 'b'], outputs: ['s'], name: 'add' },
          { opType: 'MatMul', inputs: ['s', 'W'], outputs: ['y'], name: 'mm' },
        ],
        initializers: [
          { name: 'b', elemType: 'float32', dims: [3], rawData: bytesOf(b) },
          { name: 'W', elemType: 'float32', dims: [3, 2], rawData: bytesOf(W) },
        ],
        inputs: [{ name: 'x', elemType: 'float32', dims: ['batch', 3] }],
        outputs: [{ name: 'y', elemType: 'float32', dims: ['batch', 2] }],
      },
    };
    const session = await ort.InferenceSession.create(encodeModel(model), NO_SPIN);
    expect(session.inputNames).toEqual(['x']);
    expect(session.outputNames).toEqual(['y']);
    const x = new ort.Tensor('float32', new Float32Array([0, 0, 0, 1, -2, 0.5]), [2, 3]);
    const { y } = await session.run({ x });
    expect(y!.dims).toEqual([2, 2]);
    // row 0: s=[1,2,3] -> [1+6, 2-3] = [7,-1]; row 1: s=[2,0,3.5] -> [2+7, -3.5] = [9,-3.5]
    expect([...(y!.data as Float32Array)]).toEqual([7, -1, 9, -3.5]);
    await session.release();
  });

  it('carries INT, FLOAT, INTS, FLOATS and STRING attributes and int64/uint8/int32/float16 initializers', async () => {
    // Cast(uint8 -> float) + Reshape(int64 shape) + Gather(int32 idx) + LeakyRelu(alpha FLOAT)
    // + Transpose(perm INTS) + Cast(float16 -> float); a STRING attribute (Gelu approximate).
    const u8 = new Uint8Array([1, 2, 3, 4, 5, 6]);
    const shape = new BigInt64Array([3n, 2n]);
    const idx = new Int32Array([2, 0]);
    const h = new Uint16Array([0x3c00, 0xc000]); // 1.0, -2.0
    const model: ModelSpec = {
      irVersion: 10,
      opsetImports: [{ domain: '', version: 21 }],
      graph: {
        name: 'attrs',
        nodes: [
          { opType: 'Cast', inputs: ['u8'], outputs: ['f'], attributes: [{ name: 'to', type: 'INT', value: 1 }] },
          { opType: 'Reshape', inputs: ['f', 'shape'], outputs: ['r'] },
          { opType: 'Gather', inputs: ['r', 'idx'], outputs: ['gth'], attributes: [{ name: 'axis', type: 'INT', value: 0 }] },
          { opType: 'Transpose', inputs: ['gth'], outputs: ['t'], attributes: [{ name: 'perm', type: 'INTS', value: [1, 0] }] },
          { opType: 'Cast', inputs: ['h'], outputs: ['hf'], attributes: [{ name: 'to', type: 'INT', value: 1 }] },
          { opType: 'Mul', inputs: ['x', 'hf'], outputs: ['xm'] },
          { opType: 'LeakyRelu', inputs: ['xm'], outputs: ['lr'], attributes: [{ name: 'alpha', type: 'FLOAT', value: 0.5 }] },
          { opType: 'Gelu', inputs: ['lr'], outputs: ['ge'], attributes: [{ name: 'approximate', type: 'STRING', value: 'none' }] },
          { opType: 'Constant', inputs: [], outputs: ['c'], attributes: [{ name: 'value_floats', type: 'FLOATS', value: [0.25, -4] }] },
        ],
        initializers: [
          { name: 'u8', elemType: 'uint8', dims: [6], rawData: u8 },
          { name: 'shape', elemType: 'int64', dims: [2], rawData: bytesOf(shape) },
          { name: 'idx', elemType: 'int32', dims: [2], rawData: bytesOf(idx) },
          { name: 'h', elemType: 'float16', dims: [2], rawData: bytesOf(h) },
        ],
        inputs: [{ name: 'x', elemType: 'float32', dims: [2] }],
        outputs: [
          { name: 't', elemType: 'float32', dims: [2, 2] },
          { name: 'lr', elemType: 'float32', dims: [2] },
          { name: 'ge', elemType: 'float32' },
          { name: 'c', elemType: 'float32', dims: [2] },
        ],
      },
    };
    const session = await ort.InferenceSession.create(encodeModel(model), NO_SPIN);
    const out = await session.run({ x: new ort.Tensor('float32', new Float32Array([3, 3]), [2]) });
    // r = [[1,2],[3,4],[5,6]]; gather rows 2,0 -> [[5,6],[1,2]]; transpose -> [[5,1],[6,2]]
    expect([...(out.t!.data as Float32Array)]).toEqual([5, 1, 6, 2]);
    // x*h = [3, -6]; leaky relu alpha 0.5 -> [3, -3]
    expect([...(out.lr!.data as Float32Array)]).toEqual([3, -3]);
    expect(out.ge!.dims).toEqual([2]);
    expect([...(out.c!.data as Float32Array)]).toEqual([0.25, -4]);
    await session.release();
  });
});
