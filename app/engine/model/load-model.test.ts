import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ModelFileError } from '../../common/errors.ts';
import { haveSharedModel, STORIES_260K } from '../../../test/support/models.ts';
import { loadModel } from './load-model.ts';

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
