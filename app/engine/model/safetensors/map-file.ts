// Opening a model file for reading without copying it into the JS heap more than once.
// The native addon (native/index.js `mapFile`) will map files; until it is wired in, this reads
// the file with one fs.readFileSync call. This function is the only place to switch.
import { readFileSync } from 'node:fs';
import { ModelFileError } from '../../../common/errors.ts';

export interface MappedFile {
  readonly path: string;
  /** The whole file. */
  readonly bytes: Uint8Array;
  /** True when the bytes live outside the JS heap (mapped). */
  readonly external: boolean;
  /** Releases the bytes; reading them afterwards is a bug. Idempotent. */
  close(): void;
  readonly closed: boolean;
}

/** Opens `path` for reading; errors name the file as `displayName` (e.g. relative to the model folder). */
export function openModelFile(path: string, displayName: string = path): MappedFile {
  let bytes: Uint8Array;
  try {
    bytes = readFileSync(path);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? 'unknown';
    const reason = code === 'ENOENT' ? 'does not exist' : code === 'EISDIR' ? 'is a folder, not a file' : `cannot be read (${code})`;
    throw new ModelFileError('MODEL_NOT_FOUND', displayName, `${reason}`, { path, errno: code });
  }
  let closed = false;
  return {
    path,
    bytes,
    external: false,
    get closed() {
      return closed;
    },
    close() {
      closed = true;
    },
  };
}
