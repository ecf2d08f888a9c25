// A bounds-checked little-endian cursor over a GGUF file. Every read checks the bytes that remain
// and fails with a ModelFileError naming the file, what was being read and where; 64-bit values
// come back as BigInt and become numbers only through `count`/`safeNumber`, which check them first.
import { ModelFileError, type ErrorCode } from '../../../common/errors.ts';

/** Bytes beyond which a count cannot belong to a real GGUF header (largest vocabularies need a few MB). */
export const PLAUSIBLE_HEADER_BYTES = 256n << 20n;

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

export class ByteCursor {
  pos = 0;
  readonly length: number;
  private readonly view: DataView;

  constructor(
    readonly bytes: Uint8Array,
    readonly file: string,
  ) {
    this.length = bytes.length;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  get remaining(): number {
    return this.length - this.pos;
  }

  fail(code: ErrorCode, message: string, offset: number = this.pos, details: Record<string, string | number | boolean> = {}): never {
    throw new ModelFileError(code, this.file, message, details, offset);
  }

  /** Throws MODEL_TRUNCATED unless `n` more bytes exist. */
  need(n: number, what: string): void {
    if (n > this.length - this.pos) {
      this.fail('MODEL_TRUNCATED', `file ends at byte ${this.length}, inside ${what} (${n} bytes needed from byte ${this.pos})`, this.pos, { needed: n, fileSize: this.length });
    }
  }

  u8(what: string): number {
    this.need(1, what);
    return this.view.getUint8(this.pos++);
  }

  i8(what: string): number {
    this.need(1, what);
    return this.view.getInt8(this.pos++);
  }

  u16(what: string): number {
    this.need(2, what);
    const v = this.view.getUint16(this.pos, true);
    this.pos += 2;
    return v;
  }

  i16(what: string): number {
    this.need(2, what);
    const v = this.view.getInt16(this.pos, true);
    this.pos += 2;
    return v;
  }

  u32(what: string): number {
    this.need(4, what);
    const v = this.view.getUint32(this.pos, true);
    this.pos += 4;
    return v;
  }

  i32(what: string): number {
    this.need(4, what);
    const v = this.view.getInt32(this.pos, true);
    this.pos += 4;
    return v;
  }

  u64(what: string): bigint {
    this.need(8, what);
    const v = this.view.getBigUint64(this.pos, true);
    this.pos += 8;
    return v;
  }

  i64(what: string): bigint {
    this.need(8, what);
    const v = this.view.getBigInt64(this.pos, true);
    this.pos += 8;
    return v;
  }

  f32(what: string): number {
    this.need(4, what);
    const v = this.view.getFloat32(this.pos, true);
    this.pos += 4;
    return v;
  }

  f64(what: string): number {
    this.need(8, what);
    const v = this.view.getFloat64(this.pos, true);
    this.pos += 8;
    return v;
  }

  /**
   * A count read from the file (at `at`) that promises `count` items of at least `minBytesEach`
   * bytes, checked before anything is allocated. When the rest of the file cannot hold them:
   * MODEL_ABSURD_COUNT if they would need more than PLAUSIBLE_HEADER_BYTES (no real GGUF header
   * comes near that, so the count itself is garbage), else MODEL_TRUNCATED (a plausible count in a
   * file that was cut short).
   */
  count(count: bigint, minBytesEach: number, what: string, at: number): number {
    const needed = count * BigInt(minBytesEach);
    if (needed > BigInt(this.remaining)) {
      const details = { count: count.toString(), remaining: this.remaining };
      if (needed > PLAUSIBLE_HEADER_BYTES) {
        this.fail('MODEL_ABSURD_COUNT', `${what} is ${count}, but the ${this.remaining} bytes left in the file could hold at most ${Math.floor(this.remaining / Math.max(1, minBytesEach))}`, at, details);
      }
      this.fail('MODEL_TRUNCATED', `file ends at byte ${this.length}, but ${what} (${count}) needs at least ${needed} more bytes from byte ${this.pos}`, this.pos, details);
    }
    return Number(count);
  }

  /** A GGUF string: u64 byte length, then UTF-8 bytes (no terminator). */
  string(what: string): string {
    const at = this.pos;
    const length = this.count(this.u64(`the length of ${what}`), 1, `the length of ${what}`, at);
    const start = this.pos;
    this.pos += length;
    return decodeUtf8(this, start, length, what);
  }

  /** A copy of the next `byteLength` bytes as a fresh (aligned) buffer. */
  take(byteLength: number): ArrayBuffer {
    this.need(byteLength, 'array data');
    const copy = new Uint8Array(byteLength);
    copy.set(this.bytes.subarray(this.pos, this.pos + byteLength));
    this.pos += byteLength;
    return copy.buffer;
  }
}

function decodeUtf8(cursor: ByteCursor, start: number, length: number, what: string): string {
  const bytes = cursor.bytes;
  if (length <= 64) {
    let ascii = true;
    for (let i = start; i < start + length; i++) {
      if ((bytes[i] as number) >= 0x80) {
        ascii = false;
        break;
      }
    }
    if (ascii) return String.fromCharCode(...bytes.subarray(start, start + length));
  }
  try {
    return utf8.decode(bytes.subarray(start, start + length));
  } catch {
    return cursor.fail('MODEL_BAD_VALUE', `${what} is not valid UTF-8`, start, { length });
  }
}
