// alignExternalData on files onnxruntime itself saved: every region lands on a 4 KiB boundary with
// its bytes unchanged, and a file it cannot re-lay out is a typed error that leaves nothing behind.
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, truncateSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OnnxError } from './errors.ts';
import { alignExternalData, EXTERNAL_DATA_ALIGNMENT } from './external-data-align.ts';
import { GraphBuilder } from './graph-builder.ts';
import { quantizeNBits } from './matmul-nbits.ts';
import { linear } from './ops.ts';
import { createSession } from './session.ts';

const k = 96; // rows of 96 bytes: the blobs fall off any 64-byte boundary
let dir: string;

async function saved(name: string): Promise<string> {
  let seed = 3;
  const rand = (): number => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32) * 2 - 1;
  const g = new GraphBuilder(name);
  const x = g.input('x', 'float32', [1, 'T', k]);
  for (const [i, n] of [97, 33].entries()) {
    g.rename(linear(g, x, { kind: 'nbits', packed: quantizeNBits(Float32Array.from({ length: n * k }, rand), n, k, 8), accuracyLevel: 4 }, `p${i}`), `y${i}`);
    g.output(`y${i}`, 'float32', [1, 'T', n]);
  }
  const modelPath = path.join(dir, `${name}.onnx`);
  const s = await createSession(g.toModel(), { intraOpThreads: 1, saveOptimized: { modelPath, externalFile: `${name}.bin` } });
  await s.release();
  return modelPath;
}

/** The offsets the model's text names (the entries are plain strings in the protobuf). */
function offsets(modelPath: string): number[] {
  const t = readFileSync(modelPath).toString('latin1');
  return [...t.matchAll(/\|(\d+);(\d+);/g)].map((m) => Number(m[1]));
}

beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'lh-align-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('alignExternalData', () => {
  it('puts every pre-packed blob on a 4 KiB boundary', async () => {
    const modelPath = await saved('a');
    expect(offsets(modelPath).some((o) => o % 64 !== 0)).toBe(true);
    await alignExternalData(modelPath, 'a.bin');
    const after = offsets(modelPath);
    expect(after).toHaveLength(2);
    expect(after.every((o) => o % EXTERNAL_DATA_ALIGNMENT === 0)).toBe(true);
    expect(statSync(path.join(dir, 'a.bin')).size).toBeGreaterThan(after[1]!);
  });

  it('refuses an external file that ends inside a region, leaving the files as they were', async () => {
    const modelPath = await saved('b');
    const bin = path.join(dir, 'b.bin');
    truncateSync(bin, statSync(bin).size - 10);
    const model = readFileSync(modelPath);
    await expect(alignExternalData(modelPath, 'b.bin')).rejects.toThrow(OnnxError);
    expect(readFileSync(modelPath).equals(model)).toBe(true);
    expect(readdirSync(dir).filter((f) => f.endsWith('.aligned'))).toEqual([]);
  });
});
