// Re-encodes an F32 GGUF model's matrices as F16 or Q8_0 (what `llama-quantize` does for those
// types): every 2-D tensor is converted from its fp32 values with the fixture encoders, 1-D tensors
// (norm weights) stay F32 as llama.cpp keeps them, metadata is copied with its declared types and
// general.file_type is set to the new llama_ftype. So a trained model can be compared with
// llama.cpp in the weight types the fixtures cover, without a Python toolchain.
import { readFileSync } from 'node:fs';
import { parseGguf, type GgufValue as ReadValue, type GgufValueType } from '../../app/engine/model/gguf/reader.ts';
import { writeGguf, type GgufScalarType, type GgufTensorSpec, type GgufValue } from '../fixtures/gguf-writer.ts';
import { encode } from '../fixtures/quantize.ts';

/** llama_ftype of a model whose matrices are all of one type. */
const FILE_TYPE = { F16: 1, Q8_0: 7 } as const;

const SCALAR: Record<Exclude<GgufValueType, 'array'>, GgufScalarType> = {
  uint8: 'u8',
  int8: 'i8',
  uint16: 'u16',
  int16: 'i16',
  uint32: 'u32',
  int32: 'i32',
  float32: 'f32',
  bool: 'bool',
  string: 'string',
  uint64: 'u64',
  int64: 'i64',
  float64: 'f64',
};

function toWriterValue(value: ReadValue, type: GgufValueType, itemType: GgufValueType | undefined, key: string): GgufValue {
  if (type === 'array') {
    if (itemType === undefined || itemType === 'array') throw new Error(`convertGguf: nested array ${key} is not supported`);
    return { type: 'array', itemType: SCALAR[itemType], value: value as readonly string[] | ArrayLike<number> };
  }
  return { type: SCALAR[type], value } as GgufValue;
}

/** Writes `dst`: `src` (an F32 GGUF) with every matrix in `type`. */
export function convertGguf(src: string, dst: string, type: 'F16' | 'Q8_0'): void {
  const file = parseGguf(readFileSync(src), src);
  const metadata: [string, GgufValue][] = [];
  for (const [key, value] of file.metadata) {
    if (key === 'general.alignment') continue; // the writer writes it from `alignment`
    const tag = file.metadataTypes.get(key)!;
    metadata.push([key, key === 'general.file_type' ? { type: 'u32', value: FILE_TYPE[type] } : toWriterValue(value, tag.type, tag.itemType, key)]);
  }
  if (!file.metadata.has('general.file_type')) metadata.push(['general.file_type', { type: 'u32', value: FILE_TYPE[type] }]);
  const tensors: GgufTensorSpec[] = [];
  for (const info of file.tensors.values()) {
    if (info.typeName !== 'F32') throw new Error(`convertGguf: ${info.name} is ${info.typeName}; the source must be F32`);
    const values = file.tensorView(info.name).toFloat32();
    const matrix = info.ne.length === 2;
    tensors.push({ name: info.name, type: matrix ? type : 'F32', ne: info.ne, data: encode(matrix ? type : 'F32', values) });
  }
  writeGguf(dst, { alignment: file.alignment, metadata, tensors });
}
