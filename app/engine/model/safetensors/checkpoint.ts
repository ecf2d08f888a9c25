// A Hugging Face safetensors checkpoint in a folder: either one `model.safetensors`, or shards
// listed by `model.safetensors.index.json` ({ weight_map: { tensorName: shardFileName } }).
// Every shard is opened and fully validated; tensors keep their Hugging Face names here
// (arch/ renames them to canonical ones).
import { existsSync, readFileSync, statSync } from 'node:fs';
import { isAbsolute, join, relative, resolve, sep } from 'node:path';
import { ModelFileError } from '../../../common/errors.ts';
import type { TensorView } from '../types.ts';
import { findDuplicateKey } from './json-keys.ts';
import { openModelFile, type MappedFile } from '../map-file.ts';
import { parseSafetensors, type SafetensorsFile } from './parse.ts';

export const SINGLE_FILE = 'model.safetensors';
export const INDEX_FILE = 'model.safetensors.index.json';

export interface SafetensorsCheckpoint {
  readonly folder: string;
  /** Shard file names relative to the folder, in index order (one entry for a single file). */
  readonly files: readonly string[];
  readonly parsed: readonly SafetensorsFile[];
  /** All tensors of all shards under their stored names. */
  readonly tensors: ReadonlyMap<string, TensorView>;
  /** Which file each tensor came from. */
  readonly tensorFile: ReadonlyMap<string, string>;
  /** Sum of the tensor data bytes of all files. */
  readonly dataBytes: number;
  close(): void;
}

/** True when the folder holds a safetensors checkpoint we know how to open. */
export function hasSafetensorsCheckpoint(folder: string): boolean {
  return existsSync(join(folder, INDEX_FILE)) || existsSync(join(folder, SINGLE_FILE));
}

/** Opens the checkpoint in `folder`; on any error every file opened so far is closed again. */
export function openSafetensorsCheckpoint(folder: string): SafetensorsCheckpoint {
  const indexPath = join(folder, INDEX_FILE);
  let files: string[];
  let weightMap: Map<string, string> | undefined;
  if (existsSync(indexPath)) {
    weightMap = readIndex(indexPath);
    files = [...new Set(weightMap.values())];
    for (const file of files) checkShardName(file, folder);
    for (const file of files) {
      const path = join(folder, file);
      if (!existsSync(path) || !statSync(path).isFile()) {
        throw new ModelFileError('MODEL_NOT_FOUND', file, `shard named by ${INDEX_FILE} is missing from ${folder}`, { folder, index: INDEX_FILE });
      }
    }
  } else if (existsSync(join(folder, SINGLE_FILE))) {
    files = [SINGLE_FILE];
  } else {
    throw new ModelFileError('MODEL_NOT_FOUND', folder, `no ${SINGLE_FILE} or ${INDEX_FILE} in the folder`, { folder });
  }

  const mapped: MappedFile[] = [];
  const closeAll = (): void => {
    for (const file of mapped) file.close();
  };
  try {
    const parsed: SafetensorsFile[] = [];
    const tensors = new Map<string, TensorView>();
    const tensorFile = new Map<string, string>();
    let dataBytes = 0;
    for (const file of files) {
      const handle = openModelFile(join(folder, file), file);
      mapped.push(handle);
      const assertOpen = (): void => {
        if (handle.closed) throw new Error(`${file}: the model was closed; its tensors can no longer be read`);
      };
      const shard = parseSafetensors(handle.bytes, file, { assertOpen });
      parsed.push(shard);
      dataBytes += shard.dataBytes;
      for (const [name, view] of shard.tensors) {
        const other = tensorFile.get(name);
        if (other !== undefined) {
          throw new ModelFileError('MODEL_DUPLICATE_KEY', file, `tensor '${name}' is also stored in ${other}`, { tensor: name, first: other, second: file });
        }
        tensors.set(name, view);
        tensorFile.set(name, file);
      }
    }
    if (weightMap !== undefined) {
      for (const [name, file] of weightMap) {
        const actual = tensorFile.get(name);
        if (actual !== file) {
          const where = actual === undefined ? 'which does not hold it' : `but it is stored in ${actual}`;
          throw new ModelFileError('MODEL_MISSING_TENSOR', INDEX_FILE, `weight_map puts tensor '${name}' in ${file}, ${where}`, { tensor: name, shard: file });
        }
      }
    }
    return {
      folder,
      files,
      parsed,
      tensors,
      tensorFile,
      dataBytes,
      close: closeAll,
    };
  } catch (error) {
    closeAll();
    throw error;
  }
}

function readIndex(indexPath: string): Map<string, string> {
  let text: string;
  try {
    text = readFileSync(indexPath, 'utf8');
  } catch (error) {
    throw new ModelFileError('MODEL_NOT_FOUND', INDEX_FILE, `cannot be read (${(error as NodeJS.ErrnoException).code ?? 'unknown'})`);
  }
  let index: unknown;
  try {
    index = JSON.parse(text);
  } catch (error) {
    throw new ModelFileError('MODEL_BAD_HEADER', INDEX_FILE, `is not valid JSON: ${(error as Error).message}`);
  }
  const weightMap = (index as { weight_map?: unknown } | null)?.weight_map;
  if (typeof index !== 'object' || index === null || typeof weightMap !== 'object' || weightMap === null || Array.isArray(weightMap)) {
    throw new ModelFileError('MODEL_BAD_HEADER', INDEX_FILE, 'must be an object with a weight_map object { tensorName: shardFileName }');
  }
  const duplicate = findDuplicateKey(text);
  if (duplicate !== undefined) {
    throw new ModelFileError('MODEL_DUPLICATE_KEY', INDEX_FILE, `names '${duplicate.key}' twice`, { key: duplicate.key });
  }
  const map = new Map<string, string>();
  for (const [name, file] of Object.entries(weightMap as Record<string, unknown>)) {
    if (typeof file !== 'string' || file.length === 0) {
      throw new ModelFileError('MODEL_BAD_HEADER', INDEX_FILE, `weight_map['${name}'] must be a shard file name`, { tensor: name });
    }
    map.set(name, file);
  }
  if (map.size === 0) throw new ModelFileError('MODEL_BAD_HEADER', INDEX_FILE, 'weight_map is empty');
  return map;
}

/** Shard names come from a file we did not write: they must stay inside the folder. */
function checkShardName(file: string, folder: string): void {
  const root = resolve(folder);
  const target = resolve(root, file);
  const rel = relative(root, target);
  const escapes = isAbsolute(file) || file.includes('\\') || file.includes('\0') || rel === '' || rel.startsWith(`..${sep}`) || rel === '..' || isAbsolute(rel);
  if (escapes) {
    throw new ModelFileError('MODEL_BAD_HEADER', INDEX_FILE, `shard name '${file}' points outside the model folder`, { shard: file });
  }
}
