import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ModelFileError } from '../../common/errors.ts';
import { haveSharedModel, STORIES_260K } from '../../../test/support/models.ts';
import { loadModel } from './load-model.ts';
import { isNativeAvailable } from '../../../native/index.js';

const scratch = mkdtempSync(join(tmpdir(), 'longhand-load-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

async function failure(path: string): Promise<ModelFileError> {
  const error = await loadModel(path).then(() => undefined, (e: unknown) => e);
  expect(error).toBeInstanceOf(ModelFileError);
  return error as ModelFileError;
}

describe('loadModel', () => {
  it.runIf(haveSharedModel())('opens a GGUF file by its magic, whatever its name', async () => {
    const model = await loadModel(STORIES_260K);
    try {
      expect(model.format).toBe('gguf');
      expect(model.hyper.layers).toBe(5);
    } finally {
      model.close();
    }
  });

  it.runIf(haveSharedModel())('releaseTensor gives the pages of a mapped tensor back; its bytes read the same afterwards', async () => {
    const model = await loadModel(STORIES_260K);
    try {
      const name = 'blk.0.ffn_up.weight';
      const before = Buffer.from(model.tensors.get(name)!.bytes());
      const released = model.releaseTensor?.(name) ?? 0;
      if (isNativeAvailable()) expect(released).toBeGreaterThanOrEqual(before.length);
      else expect(released).toBe(0); // read into memory: nothing to give back
      expect(Buffer.compare(Buffer.from(model.tensors.get(name)!.bytes()), before)).toBe(0);
      expect(model.releaseTensor?.('no.such.tensor')).toBe(0);
    } finally {
      model.close();
    }
  });

  it('names what is wrong with other paths', async () => {
    expect((await failure(join(scratch, 'missing.gguf'))).code).toBe('MODEL_NOT_FOUND');
    const text = join(scratch, 'notes.gguf');
    writeFileSync(text, 'hello world');
    const notGguf = await failure(text);
    expect(notGguf.code).toBe('MODEL_BAD_MAGIC');
    expect(notGguf.message).toContain('"hell"');
    const single = join(scratch, 'model.safetensors');
    writeFileSync(single, Buffer.alloc(16));
    expect((await failure(single)).message).toMatch(/open the folder/);
    const emptyFolder = mkdtempSync(join(scratch, 'empty-'));
    expect((await failure(emptyFolder)).code).toMatch(/^MODEL_/);
  });
});
