// Token (and OPT position) embedding lookup outside onnxruntime: only the rows asked for are
// widened or dequantised, straight from the mapped file (a quantised row is whole blocks, so its
// byte range dequantises on its own). No fp32 copy of the table is kept.
//
// Reading one row through the mapping makes the kernel map the 16 pages around it ("fault-around",
// 64 KiB; madvise(MADV_RANDOM) does not stop it), so a table read row by row ends up resident
// nearly whole: 520 random rows of a 32,000 x 2,048 Q8_0 table (68 MiB) added 50 MiB of RSS here.
// Where the caller passes `release` (the table is read only here, not also streamed as the LM
// head), its pages are dropped every RELEASE_EVERY_ROWS rows: at most that many rows' worth stay
// resident (16 MiB at 64 KiB a row); a later read faults its page in again from the page cache.
import { byteSizeOf, dequantize } from '../model/gguf/dequant.ts';
import type { TensorView } from '../model/types.ts';

/** Rows read between two releases of the table's pages (see above). */
export const RELEASE_EVERY_ROWS = 256;

export class EmbeddingTable {
  readonly rows: number;
  readonly width: number;
  private readonly raw: Uint8Array;
  private readonly rowBytes: number;
  private readonly f32: Float32Array | undefined;
  private rowsSinceRelease = 0;

  /** release: drops the table's resident pages (LoadedModel.releaseTensor), returns the bytes advised. */
  constructor(
    private readonly view: TensorView,
    private readonly release?: () => number,
  ) {
    const [rows, width] = view.shape as [number, number];
    this.rows = rows;
    this.width = width;
    this.raw = view.bytes();
    this.rowBytes = byteSizeOf(view.dtype, width);
    // F32 rows aligned in the mapping: read them in place
    this.f32 = view.dtype === 'F32' && this.raw.byteOffset % 4 === 0 ? new Float32Array(this.raw.buffer, this.raw.byteOffset, rows * width) : undefined;
  }

  /** Writes row `row` into out[at .. at + width). */
  readRow(row: number, out: Float32Array, at: number): void {
    if (!Number.isInteger(row) || row < 0 || row >= this.rows) throw new RangeError(`${this.view.name}: row ${row} is outside 0..${this.rows - 1}`);
    if (this.release && ++this.rowsSinceRelease >= RELEASE_EVERY_ROWS) {
      this.rowsSinceRelease = 0;
      this.release();  // before the read: the row read now is the first to fault in again
    }
    if (this.f32) {
      out.set(this.f32.subarray(row * this.width, (row + 1) * this.width), at);
      return;
    }
    out.set(dequantize(this.view.dtype, this.raw.subarray(row * this.rowBytes, (row + 1) * this.rowBytes), this.width), at);
  }

  /** Adds row `row` to out[at .. at + width). */
  addRow(row: number, out: Float32Array, at: number, scratch: Float32Array): void {
    this.readRow(row, scratch, 0);
    for (let i = 0; i < this.width; i++) out[at + i] = Math.fround(out[at + i]! + scratch[i]!);
  }
}
