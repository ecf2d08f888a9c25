// Opening a model file for reading without copying it into the JS heap.
// With the native addon built, files are memory-mapped (native/index.js `mapFile`: external
// memory under Node, one copy under Electron's V8 memory cage). Without it, one fs.readFileSync
// call reads the file once. Either way the bytes are held once; tensor views are subarrays.
import { readFileSync } from 'node:fs';
import { ModelFileError, isLonghandError } from '../../common/errors.ts';
import { isNativeAvailable, mapFile } from '../../../native/index.js';

export interface MappedFile {
  readonly path: string;
  /** The whole file. Empty after close() when it was mapped. */
  readonly bytes: Uint8Array;
  /** True when the bytes are the mapping itself, outside the JS heap. */
  readonly external: boolean;
  /** Releases the bytes; reading them afterwards is a bug. Idempotent. */
  close(): void;
  /**
   * Drops the resident pages of bytes [offset, offset + length) when they are the mapping (a
   * hint: reading them later faults them in again from the file); returns the bytes advised, 0 when
   * the file was read or copied into memory.
   */
  release(offset: number, length: number): number;
  /**
   * Makes bytes [offset, offset + length) the process's own anonymous pages when they are the
   * mapping (native MappedFile.own: same bytes, same addresses; pages left to the page cache slow a
   * weight pass now and then); returns the bytes covered, 0 when the file was read or copied.
   */
  own(offset: number, length: number, threads?: number): number;
  readonly closed: boolean;
}

/** Opens `path` for reading; errors name the file as `displayName` (e.g. relative to the model folder). */
export function openModelFile(path: string, displayName: string = path): MappedFile {
  return isNativeAvailable() ? openMapped(path, displayName) : openRead(path, displayName);
}

function openMapped(path: string, displayName: string): MappedFile {
  let mapped: ReturnType<typeof mapFile>;
  try {
    mapped = mapFile(path);
  } catch (error) {
    if (isLonghandError(error) && error.code === 'NATIVE_IO') {
      const errno = error.details.errno;
      const reason = errno === 2 ? 'does not exist' : `cannot be mapped (${error.message})`;
      throw new ModelFileError('MODEL_NOT_FOUND', displayName, reason, { path, errno: typeof errno === 'number' ? errno : undefined });
    }
    throw error;
  }
  const bytes = new Uint8Array(mapped.buffer, 0, mapped.byteLength);
  return {
    path,
    bytes,
    external: mapped.external,
    get closed() {
      return mapped.closed;
    },
    close() {
      mapped.close();
    },
    release(offset: number, length: number) {
      return mapped.closed ? 0 : mapped.release(offset, length);
    },
    own(offset: number, length: number, threads?: number) {
      return mapped.closed ? 0 : mapped.own(offset, length, threads);
    },
  };
}

function openRead(path: string, displayName: string): MappedFile {
  let bytes: Uint8Array;
  try {
    bytes = readFileSync(path);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? 'unknown';
    const reason = code === 'ENOENT' ? 'does not exist' : code === 'EISDIR' ? 'is a folder, not a file' : `cannot be read (${code})`;
    throw new ModelFileError('MODEL_NOT_FOUND', displayName, reason, { path, errno: code });
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
    release() {
      return 0;
    },
    own() {
      return 0;
    },
  };
}
