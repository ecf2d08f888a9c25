import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ModelFileError } from '../../common/errors.ts';
import { isNativeAvailable } from '../../../native/index.js';
import { openModelFile } from './map-file.ts';
import { parseSafetensors } from './safetensors/parse.ts';
import { encodeSafetensors } from './safetensors/safetensors-test-writer.ts';

const dir = mkdtempSync(join(tmpdir(), 'longhand-map-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('openModelFile', () => {
  it(`maps the file (native addon ${isNativeAvailable() ? 'present: external memory' : 'absent: one readFileSync'}) and views point into it`, () => {
    const path = join(dir, 'a.safetensors');
    writeFileSync(path, encodeSafetensors([{ name: 'w', dtype: 'F16', shape: [2], values: [1, -2] }]));
    const file = openModelFile(path, 'a.safetensors');
    expect(file.external).toBe(isNativeAvailable());
    const parsed = parseSafetensors(file.bytes, 'a.safetensors');
    const view = parsed.tensors.get('w')!;
    expect(view.bytes().buffer).toBe(file.bytes.buffer);
    expect(Array.from(view.toFloat32())).toEqual([1, -2]);
    file.close();
    file.close();
    expect(file.closed).toBe(true);
  });

  it('names a missing file with MODEL_NOT_FOUND', () => {
    expect(() => openModelFile(join(dir, 'nope.safetensors'), 'nope.safetensors')).toThrow(ModelFileError);
    expect(() => openModelFile(join(dir, 'nope.safetensors'), 'nope.safetensors')).toThrow(/nope\.safetensors: does not exist/);
  });

  it('an empty file opens and then fails to parse as truncated', () => {
    writeFileSync(join(dir, 'empty.safetensors'), '');
    const file = openModelFile(join(dir, 'empty.safetensors'), 'empty.safetensors');
    expect(() => parseSafetensors(file.bytes, 'empty.safetensors')).toThrow(/too short/);
    file.close();
  });
});
