// A model's tensors as the graph helpers want them: Linear weights in fp32 (F32/F16/BF16) or
// repacked bit-exactly for MatMulNBits (every GGUF block type; natively on every core when the
// addon is built, onnx/gguf-repack-native.ts), and 1-D vectors in fp32.
//
// Weights held once: once a quantised tensor is repacked, its pages of the mapped file are given
// back (LoadedModel.releaseTensor), so the process does not hold the file beside onnxruntime's
// copy. Reading the tensor again (the token embedding's rows, a tied LM head) faults in what it reads.
import { LonghandError } from '../../common/errors.ts';
import type { LoadedModel, TensorView } from '../model/types.ts';
import { repackGgufFast } from '../onnx/gguf-repack-native.ts';
import type { LinearWeights } from '../onnx/ops.ts';

export type AccuracyLevel = 0 | 1 | 2 | 3 | 4;

export class ModelWeights {
  constructor(
    readonly model: LoadedModel,
    readonly accuracyLevel: AccuracyLevel,
  ) {}

  has(name: string): boolean {
    return this.model.tensors.has(name);
  }

  view(name: string): TensorView {
    const v = this.model.tensors.get(name);
    if (v === undefined) throw new LonghandError('MODEL_MISSING_TENSOR', `${this.model.path}: tensor ${name} is missing`, { tensor: name });
    return v;
  }

  vector(name: string): Float32Array {
    return this.view(name).toFloat32();
  }

  optionalVector(name: string): Float32Array | undefined {
    return this.has(name) ? this.vector(name) : undefined;
  }

  /** Linear(in, out) from a [out, in] tensor, with its bias `biasName` when the file has it. */
  linear(name: string, biasName?: string): LinearWeights {
    const v = this.view(name);
    if (v.shape.length !== 2) throw new LonghandError('MODEL_SHAPE_MISMATCH', `${this.model.path}: ${name} has shape [${v.shape.join(', ')}], expected 2 dimensions`, { tensor: name });
    const [out, inF] = v.shape as [number, number];
    const bias = biasName === undefined ? undefined : this.optionalVector(biasName);
    if (v.dtype === 'F32' || v.dtype === 'F16' || v.dtype === 'BF16') {
      const w: LinearWeights = { kind: 'f32', outFeatures: out, inFeatures: inF, weight: v.toFloat32() };
      if (bias) w.bias = bias;
      return w;
    }
    const packed = repackGgufFast(v.dtype, v.bytes(), out, inF);
    this.model.releaseTensor?.(name);
    const w: LinearWeights = { kind: 'nbits', packed, accuracyLevel: this.accuracyLevel };
    if (bias) w.bias = bias;
    return w;
  }
}
