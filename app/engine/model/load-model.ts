// One entry for every model path a user can give: a .gguf file or a Hugging Face folder.
// The format is decided by what is there (a folder, or the file's magic bytes), not by the name.
import { closeSync, openSync, readSync, statSync } from 'node:fs';
import { ModelFileError } from '../../common/errors.ts';
import { loadGgufModel } from './gguf/gguf-model.ts';
import { loadHfModel } from './hf/load.ts';
import type { LoadedModel } from './types.ts';

const GGUF_MAGIC = 'GGUF';

export async function loadModel(path: string): Promise<LoadedModel> {
  let isFolder: boolean;
  try {
    isFolder = statSync(path).isDirectory();
  } catch {
    throw new ModelFileError('MODEL_NOT_FOUND', path, 'does not exist');
  }
  if (isFolder) return loadHfModel(path);

  const magic = readMagic(path);
  if (magic === GGUF_MAGIC) return loadGgufModel(path);
  if (path.endsWith('.safetensors')) {
    throw new ModelFileError('MODEL_BAD_MAGIC', path, 'is a single safetensors file: open the folder that holds it with its config.json and tokenizer.json');
  }
  throw new ModelFileError('MODEL_BAD_MAGIC', path, `is not a GGUF file (starts with ${JSON.stringify(magic)}) nor a Hugging Face folder`);
}

function readMagic(path: string): string {
  const fd = openSync(path, 'r');
  try {
    const head = Buffer.alloc(4);
    const read = readSync(fd, head, 0, 4, 0);
    return head.subarray(0, read).toString('latin1');
  } finally {
    closeSync(fd);
  }
}
