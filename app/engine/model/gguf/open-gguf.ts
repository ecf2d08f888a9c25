// Opening a GGUF file from disk. The bytes come from openModelFile (../map-file.ts), the
// one place that will switch from fs.readFileSync to the native mmap (native/index.js mapFile);
// nothing here copies them again: tensor views are subarrays of the file.
import { openModelFile } from '../map-file.ts';
import { parseGgufSource, type GgufByteSource, type GgufFile, type ParseOptions } from './reader.ts';

export interface OpenGgufFile extends GgufFile {
  readonly path: string;
  /** True when the bytes live outside the JS heap (mapped). */
  readonly external: boolean;
  /** Releases the file. Tensor views fail afterwards. Idempotent. */
  close(): void;
  /** Drops the resident pages of file bytes [offset, offset + length) (see MappedFile.release); returns the bytes advised. */
  release(offset: number, length: number): number;
  /** Makes file bytes [offset, offset + length) the process's own pages (see MappedFile.own); returns the bytes covered. */
  own(offset: number, length: number, threads?: number): number;
}

/** Reads and parses the GGUF file at `path`. Missing or unreadable → MODEL_NOT_FOUND. */
export function openGguf(path: string, options: ParseOptions = {}): OpenGgufFile {
  const mapped = openModelFile(path);
  const source: GgufByteSource = { bytes: mapped.bytes };
  const close = (): void => {
    source.bytes = undefined;
    mapped.close();
  };
  try {
    const file = parseGgufSource(source, path, options);
    return { ...file, path, external: mapped.external, close, release: (offset, length) => mapped.release(offset, length), own: (offset, length, threads) => mapped.own(offset, length, threads) };
  } catch (error) {
    close();
    throw error;
  }
}
