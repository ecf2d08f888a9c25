// Token (and OPT position) embedding lookup outside onnxruntime: only the rows asked for are
// widened or dequantised, straight from the mapped file (a quantised row is whole blocks, so its
// byte range dequantises on its own). No fp32 copy of the table is kept.
import { byteSizeOf, dequantize } from '../model/gguf/dequant.ts';
import type { TensorView } from '../model/types.ts';

export class EmbeddingTable {
  readonly rows: number;
  readonly width: number;
  private readonly raw: Uint8Array;
  private readonly rowBytes: number;
  private readonly f32: Float32Array | undefined;

  constructor(private readonly view: TensorView) {
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
