// Errors of the ONNX layer. app/common/errors.ts has no codes for onnxruntime failures yet, so
// they live here until it does (proposed codes: ONNX_PROVIDER_UNAVAILABLE, ONNX_SESSION_FAILED,
// ONNX_BAD_GRAPH, ONNX_MODEL_TOO_LARGE). `details` carries the numbers behind the message.

export type OnnxErrorCode =
  | 'ONNX_PROVIDER_UNAVAILABLE' // an execution provider this onnxruntime build (or machine) cannot use
  | 'ONNX_SESSION_FAILED' // onnxruntime refused the model or failed to run it
  | 'ONNX_BAD_GRAPH' // the graph builder was asked for something inconsistent (unknown value, duplicate name)
  | 'ONNX_MODEL_TOO_LARGE'; // an in-memory model at or above protobuf's 2 GiB limit

export type OnnxErrorDetails = Readonly<Record<string, string | number | boolean | null | undefined>>;

export class OnnxError extends Error {
  readonly code: OnnxErrorCode;
  readonly details: OnnxErrorDetails;

  constructor(code: OnnxErrorCode, message: string, details: OnnxErrorDetails = {}, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'OnnxError';
    this.code = code;
    this.details = details;
  }

  toJSON(): { code: OnnxErrorCode; message: string; details: OnnxErrorDetails } {
    return { code: this.code, message: this.message, details: this.details };
  }
}
