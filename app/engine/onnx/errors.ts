// Errors of the ONNX layer: a LonghandError whose code is one of the ONNX_* codes.
// `details` carries the numbers behind the message (provider names, byte sizes).
import { LonghandError, type ErrorCode, type ErrorDetails } from '../../common/errors.ts';

export type OnnxErrorCode = Extract<ErrorCode, `ONNX_${string}`>;

export class OnnxError extends LonghandError {
  declare readonly code: OnnxErrorCode;

  constructor(code: OnnxErrorCode, message: string, details: ErrorDetails = {}, options?: { cause?: unknown }) {
    super(code, message, details, options);
    this.name = 'OnnxError';
  }
}
