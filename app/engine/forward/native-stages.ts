// The dense stages in C++ over the GGUF weights read in place from the mapped file
// (native/src/dense_stage.h), instead of onnxruntime graphs (graphs.ts, stage-sessions.ts):
//
//   per stage s:  the tensors the family's graph would read ──► createDenseStage({ views of the
//                 mapped bytes, fp32 norm vectors and biases }) ──► run(feeds) as a session would
//
// Nothing is repacked, so a load takes as long as building L + 1 small objects and giving the
// process its own copy of each weight's pages (model.ownTensors: read from the file into huge pages,
// the bytes and addresses unchanged), the process holds each weight once, and every type
// with kernels here (F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4: the files users download) runs with
// int8 activations like llama.cpp's. Chosen on the CPU provider for a family that has native
// stages (today the llama family: layers/llama-native.ts) when every weight's type has kernels
// (nativeDenseUnsupported); OPT (layers/opt.ts says why), other types, other providers and
// `dense: 'onnx'` keep onnxruntime. The runner sees the same interface (StageRunner) either way.
//
// This module picks the family's stages (layers/families.ts); what they share is in
// layers/native-stage.ts.
import { isNativeAvailable } from '../../../native/index.js';
import { UsageError } from '../../common/errors.ts';
import type { LoadedModel } from '../model/types.ts';
import { familyOf } from './layers/families.ts';
import { kernelsRefuse, type NativeStageOptions, type NativeStages } from './layers/native-stage.ts';
import type { ModelWeights } from './weights.ts';

export type { DenseKernelName, NativeStageOptions, NativeStages, StageRunner } from './layers/native-stage.ts';

/**
 * Why the native dense stages cannot run this model (undefined: they can): its family has none, no
 * addon, a weight whose type has no kernels, or only the scalar reference kernel on this
 * CPU (no AVX2: onnxruntime's MLAS is faster there), or accuracy level 0 asked for a quantized
 * model (fp32 activations: only onnxruntime's MatMulNBits computes that; the native kernels
 * quantize activations to int8 as llama.cpp does). The message names the tensor.
 */
export function nativeDenseUnsupported(model: LoadedModel, options: { accuracyLevel?: number } = {}): string | undefined {
  const native = familyOf(model.hyper).nativeStages;
  if (native.kind === 'none') return native.reason;
  if (!isNativeAvailable()) return 'the native addon is not built';
  return kernelsRefuse(model, native.linearNames(model), options);
}

/** L + 1 native stages over `weights`' mapped file. The file must stay open while they live (runs check). */
export function createNativeStages(weights: ModelWeights, options: NativeStageOptions): NativeStages {
  const native = familyOf(weights.model.hyper).nativeStages;
  if (native.kind === 'none') throw new UsageError(`${weights.model.path}: ${native.reason}`, { architecture: weights.model.hyper.architecture });
  return native.create(weights, options);
}
