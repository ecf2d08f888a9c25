// The ggml tensor element types a GGUF file can name: id, name, block size (elements per block)
// and type size (bytes per block). Types Longhand dequantises map to a TensorDType; the others are
// known so that errors can name them ("Q2_K is not supported") instead of printing a bare id.
// Ids 4, 5 (old Q4_2/Q4_3), 31-33 and 36-38 (removed repacked layouts) are retired in ggml and
// count as unknown.
import type { TensorDType } from '../types.ts';

export interface GgmlTypeInfo {
  readonly id: number;
  readonly name: string;
  /** Elements per block (1 for plain types, 32 or 256 for quantised blocks). */
  readonly blockSize: number;
  /** Bytes per block. */
  readonly typeSize: number;
  /** Set when Longhand can dequantise this type. */
  readonly dtype: TensorDType | undefined;
}

const row = (id: number, name: string, blockSize: number, typeSize: number, dtype?: TensorDType): GgmlTypeInfo => ({ id, name, blockSize, typeSize, dtype });

const QK_K = 256;

const TABLE: readonly GgmlTypeInfo[] = [
  row(0, 'F32', 1, 4, 'F32'),
  row(1, 'F16', 1, 2, 'F16'),
  row(2, 'Q4_0', 32, 2 + 16, 'Q4_0'), //       d:f16, qs[16] (two 4-bit quants per byte)
  row(3, 'Q4_1', 32, 2 + 2 + 16, 'Q4_1'), //   d:f16, m:f16, qs[16]
  row(6, 'Q5_0', 32, 2 + 4 + 16, 'Q5_0'), //   d:f16, qh:u32 (5th bits), qs[16]
  row(7, 'Q5_1', 32, 2 + 2 + 4 + 16, 'Q5_1'), // d:f16, m:f16, qh:u32, qs[16]
  row(8, 'Q8_0', 32, 2 + 32, 'Q8_0'), //       d:f16, qs:i8[32]
  row(9, 'Q8_1', 32, 2 + 2 + 32),
  row(10, 'Q2_K', QK_K, 16 + 64 + 2 + 2),
  row(11, 'Q3_K', QK_K, 32 + 64 + 12 + 2),
  row(12, 'Q4_K', QK_K, 2 + 2 + 12 + 128, 'Q4_K'), //      d, dmin:f16, scales[12] (6-bit packed), qs[128]
  row(13, 'Q5_K', QK_K, 2 + 2 + 12 + 32 + 128, 'Q5_K'), // d, dmin:f16, scales[12], qh[32], qs[128]
  row(14, 'Q6_K', QK_K, 128 + 64 + 16 + 2, 'Q6_K'), //     ql[128], qh[64], scales:i8[16], d:f16
  row(15, 'Q8_K', QK_K, 4 + 256 + 32),
  row(16, 'IQ2_XXS', QK_K, 2 + 64),
  row(17, 'IQ2_XS', QK_K, 2 + 64 + 8),
  row(18, 'IQ3_XXS', QK_K, 2 + 96),
  row(19, 'IQ1_S', QK_K, 2 + 32 + 16),
  row(20, 'IQ4_NL', 32, 2 + 16),
  row(21, 'IQ3_S', QK_K, 2 + 64 + 8 + 32 + 4),
  row(22, 'IQ2_S', QK_K, 2 + 64 + 8 + 8),
  row(23, 'IQ4_XS', QK_K, 2 + 2 + 4 + 128),
  row(24, 'I8', 1, 1),
  row(25, 'I16', 1, 2),
  row(26, 'I32', 1, 4),
  row(27, 'I64', 1, 8),
  row(28, 'F64', 1, 8),
  row(29, 'IQ1_M', QK_K, 32 + 16 + 8),
  row(30, 'BF16', 1, 2, 'BF16'),
  row(34, 'TQ1_0', QK_K, 48 + 4 + 2),
  row(35, 'TQ2_0', QK_K, 64 + 2),
  row(39, 'MXFP4', 32, 1 + 16, 'MXFP4'), //   e:E8M0 (a bare exponent), qs[16] (E2M1 nibbles)
];

const BY_ID = new Map<number, GgmlTypeInfo>(TABLE.map((info) => [info.id, info]));
const BY_DTYPE = new Map<TensorDType, GgmlTypeInfo>(TABLE.filter((info) => info.dtype !== undefined).map((info) => [info.dtype as TensorDType, info]));

/** The ggml type with this id, or undefined for an id ggml does not (or no longer) define. */
export function ggmlTypeById(id: number): GgmlTypeInfo | undefined {
  return BY_ID.get(id);
}

/** The ggml type behind one of our dtypes. */
export function ggmlTypeOfDtype(dtype: TensorDType): GgmlTypeInfo {
  const info = BY_DTYPE.get(dtype);
  if (info === undefined) throw new Error(`no ggml type for dtype ${dtype}`);
  return info;
}

/** Every ggml type this table knows, supported or not. */
export const GGML_TYPES: readonly GgmlTypeInfo[] = TABLE;
