import { describe, expect, it } from 'vitest';
import { halfToFloatBits, widenToFloat32 } from './dtype.ts';
import { findDuplicateKey } from './json-keys.ts';
import { parseSafetensors } from './parse.ts';
import { assembleSafetensors, encodeSafetensors, encodeValues, floatToBf16Bits, floatToHalfBits, randomValues, seededRandom } from './safetensors-test-writer.ts';

function u16Bytes(...values: number[]): Uint8Array {
  return new Uint8Array(Uint16Array.from(values).buffer);
}

/** Independent half decoder (arithmetic, not bit tricks) to check the table against. */
function halfByFormula(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const frac = h & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 31) return frac === 0 ? sign * Infinity : NaN;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

describe('dtype widening', () => {
  it('decodes hand-checked F16 values', () => {
    const out = widenToFloat32('F16', u16Bytes(0x3c00, 0xc000, 0x0000, 0x8000, 0x3555, 0x7bff, 0x0001, 0x7c00, 0xfc00, 0x3800), 10);
    expect(Array.from(out.slice(0, 7))).toEqual([1, -2, 0, -0, 0.333251953125, 65504, 2 ** -24]);
    expect(Object.is(out[3], -0)).toBe(true);
    expect(out[7]).toBe(Infinity);
    expect(out[8]).toBe(-Infinity);
    expect(out[9]).toBe(0.5);
    expect(Number.isNaN(widenToFloat32('F16', u16Bytes(0x7e00), 1)[0])).toBe(true);
  });

  it('decodes hand-checked BF16 values', () => {
    const out = widenToFloat32('BF16', u16Bytes(0x3f80, 0xc000, 0x4049, 0x0000, 0x7f80, 0xbf00), 6);
    expect(Array.from(out)).toEqual([1, -2, 3.140625, 0, Infinity, -0.5]);
  });

  it('agrees with an arithmetic decoder on all 65536 half patterns, and the writer inverts it', () => {
    const wrong: number[] = [];
    for (let h = 0; h < 65536; h++) {
      const bits = new Uint32Array([halfToFloatBits(h)]);
      const value = new Float32Array(bits.buffer)[0] as number;
      const expected = halfByFormula(h);
      if (Number.isNaN(expected)) {
        if (!Number.isNaN(value)) wrong.push(h);
      } else if (!Object.is(value, expected) || floatToHalfBits(value) !== h) {
        wrong.push(h);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('rounds to nearest even when writing', () => {
    expect(floatToHalfBits(1 + 2 ** -11)).toBe(0x3c00); // tie → even
    expect(floatToHalfBits(1 + 3 * 2 ** -11)).toBe(0x3c02);
    expect(floatToHalfBits(70000)).toBe(0x7c00);
    expect(floatToBf16Bits(1)).toBe(0x3f80);
    expect(floatToBf16Bits(-2)).toBe(0xc000);
  });

  it('reads unaligned data', () => {
    const backing = new Uint8Array(9);
    backing.set(u16Bytes(0x3c00, 0xc000), 1);
    expect(Array.from(widenToFloat32('F16', backing.subarray(1, 5), 2))).toEqual([1, -2]);
    const f32 = new Uint8Array(9);
    f32.set(new Uint8Array(Float32Array.from([1.5, -3]).buffer), 1);
    expect(Array.from(widenToFloat32('F32', f32.subarray(1, 9), 2))).toEqual([1.5, -3]);
  });
});

describe('findDuplicateKey', () => {
  it('finds repeats per object only', () => {
    expect(findDuplicateKey('{"a":1,"b":{"a":2},"c":[{"a":1},{"a":2}]}')).toBeUndefined();
    expect(findDuplicateKey('{"a":{"x":1,"y":"x","x":2}}')).toMatchObject({ key: 'x', path: ['a'] });
    expect(findDuplicateKey('{"a\\u0062":1,"ab":2}')).toMatchObject({ key: 'ab' });
    expect(findDuplicateKey('{"k\\"":1,"v":"\\\\","k\\"":3}')).toMatchObject({ key: 'k"' });
    expect(findDuplicateKey('[{"a":1,"b":[1,{"a":2}],"a":3}]')).toMatchObject({ key: 'a', path: [''] });
  });
});

describe('parseSafetensors', () => {
  it('round-trips F32, F16 and BF16 tensors exactly, without copying', () => {
    const random = seededRandom(7);
    const values = randomValues(random, 24, 3);
    const file = encodeSafetensors(
      [
        { name: 'a', dtype: 'F32', shape: [4, 6], values },
        { name: 'b', dtype: 'F16', shape: [2, 3, 4], values },
        { name: 'c', dtype: 'BF16', shape: [24], values },
        { name: 'empty', dtype: 'F32', shape: [0, 5], values: [] },
        { name: 'scalar', dtype: 'F16', shape: [], values: [-2] },
      ],
      { format: 'pt' },
    );
    const parsed = parseSafetensors(file, 'x.safetensors');
    expect(parsed.metadata.get('format')).toBe('pt');
    expect([...parsed.tensors.keys()]).toEqual(['a', 'b', 'c', 'empty', 'scalar']);
    const a = parsed.tensors.get('a')!;
    expect(a.shape).toEqual([4, 6]);
    expect(a.elements).toBe(24);
    expect(a.toFloat32()).toEqual(values);
    expect(a.bytes().buffer).toBe(file.buffer);
    expect(a.bytes().byteOffset).toBe(parsed.dataOffset);
    const halfBits = new Uint16Array(encodeValues('F16', values).buffer);
    const b = parsed.tensors.get('b')!.toFloat32();
    for (let i = 0; i < 24; i++) expect(b[i]).toBe(halfByFormula(halfBits[i]!));
    const c = parsed.tensors.get('c')!.toFloat32();
    for (let i = 0; i < 24; i++) expect(Math.abs(c[i]! - values[i]!)).toBeLessThanOrEqual(Math.abs(values[i]!) * 2 ** -8);
    expect(parsed.tensors.get('empty')!.toFloat32().length).toBe(0);
    expect(Array.from(parsed.tensors.get('scalar')!.toFloat32())).toEqual([-2]);
    expect(parsed.dataBytes).toBe(96 + 48 + 48 + 0 + 2);
  });

  it('accepts tensors in any order inside the data section and an empty header', () => {
    const data = new Uint8Array(new Float32Array([1, 2, 3]).buffer);
    const header = JSON.stringify({ late: { dtype: 'F32', shape: [1], data_offsets: [8, 12] }, early: { dtype: 'F32', shape: [2], data_offsets: [0, 8] } });
    const parsed = parseSafetensors(assembleSafetensors(header, data), 'o.safetensors');
    expect(Array.from(parsed.tensors.get('late')!.toFloat32())).toEqual([3]);
    expect(Array.from(parsed.tensors.get('early')!.toFloat32())).toEqual([1, 2]);
    expect(parseSafetensors(assembleSafetensors('{}', new Uint8Array()), 'e.safetensors').tensors.size).toBe(0);
  });

  it('refuses reads after close through assertOpen', () => {
    let closed = false;
    const file = encodeSafetensors([{ name: 'a', dtype: 'F32', shape: [1], values: [1] }]);
    const view = parseSafetensors(file, 'x', { assertOpen: () => { if (closed) throw new Error('closed'); } }).tensors.get('a')!;
    expect(view.toFloat32()[0]).toBe(1);
    closed = true;
    expect(() => view.bytes()).toThrow('closed');
  });
});
