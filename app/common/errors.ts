// Typed errors shared by every layer. A user (or an API client) sees `code` and `message`;
// `details` carries the numbers behind the message (offsets, sizes, limits) for logs and UIs.
// This file imports nothing from node or electron so the renderer can use it too.

/** Stable error codes. Add new codes here; never reuse one for a different meaning. */
export const ERROR_CODES = [
  // model files (GGUF, safetensors, config.json, tokenizer files)
  'MODEL_NOT_FOUND', // the path does not exist or is not readable
  'MODEL_BAD_MAGIC', // the first bytes do not identify a supported format
  'MODEL_UNSUPPORTED_VERSION', // a format version we do not read (e.g. GGUF v1 or v4+)
  'MODEL_TRUNCATED', // the file ends before a structure it declares
  'MODEL_ABSURD_COUNT', // a count or length larger than the file could possibly hold
  'MODEL_DUPLICATE_KEY', // a metadata key or tensor name appears twice
  'MODEL_BAD_VALUE', // a value of the wrong type, bad UTF-8, an unknown value-type tag
  'MODEL_MISALIGNED', // a tensor offset or alignment that breaks the format's rules
  'MODEL_TENSOR_OUT_OF_BOUNDS', // tensor data lies (partly) outside the file's data section
  'MODEL_DIMENSION_OVERFLOW', // a tensor's dimensions multiply past what can be addressed
  'MODEL_UNKNOWN_TENSOR_TYPE', // a tensor element type we do not know or do not support
  'MODEL_MISSING_METADATA', // a key the architecture needs is absent
  'MODEL_MISSING_TENSOR', // a tensor the architecture needs is absent
  'MODEL_SHAPE_MISMATCH', // a tensor's shape disagrees with the hyperparameters
  'MODEL_BAD_HEADER', // a safetensors/JSON header that does not parse or lies about sizes
  'MODEL_UNSUPPORTED_ARCHITECTURE', // an architecture Longhand does not run
  'TOKENIZER_INVALID', // a vocabulary or merges list that cannot work
  'CHAT_TEMPLATE_INVALID', // a chat template that does not parse or render
  // native addon
  'NATIVE_NOT_BUILT', // the .node binary is missing or does not load
  'NATIVE_OUT_OF_MEMORY', // mmap / allocation failed
  'NATIVE_BAD_ARGUMENT', // a call into the addon with arguments it rejects
  'NATIVE_IO', // a file could not be opened or mapped
  'NATIVE_INTERNAL', // a native failure that is a bug in Longhand
  // onnxruntime (the dense part of each layer)
  'ONNX_PROVIDER_UNAVAILABLE', // an execution provider this onnxruntime build (or machine) cannot use
  'ONNX_SESSION_FAILED', // onnxruntime refused the model or failed to run it
  'ONNX_BAD_GRAPH', // the graph builder was asked for something inconsistent
  'ONNX_MODEL_TOO_LARGE', // an in-memory model at or above protobuf's 2 GiB limit
  // engine and protocol
  'PROTOCOL_BAD_MESSAGE', // a request or event that does not match the protocol's schema
  'IPC_FORBIDDEN', // an IPC message from a sender that is not one of our windows' main frames
  'ENGINE_NOT_LOADED', // a request that needs a model before one is loaded
  'ENGINE_BUSY', // a second generation while one runs (one at a time per engine)
  'ENGINE_CRASHED', // the engine process or worker died; in-flight requests end with this
  'CONTEXT_OVERFLOW', // a prompt that does not fit the context window
  'MEMORY_INSUFFICIENT', // a model (weights + KV cache at the chosen context) that will not fit in free memory
  'ABORTED', // work stopped by its AbortSignal (a cancelled generation, between layers or tokens)
  'DEVICE_UNAVAILABLE', // an execution provider that this machine or build cannot use
  'GENERATION_INVALID_LOGITS', // logits of the wrong length, or none finite: a bug or a broken model
  // KV snapshots (a document's cached sequence saved to disk; details.reason says which check failed)
  'SNAPSHOT_UNREADABLE', // the path is missing, not a regular file (a directory, a FIFO) or cannot be read
  'SNAPSHOT_CORRUPT', // empty, truncated, bad magic or header, absurd counts, a section whose checksum fails
  'SNAPSHOT_VERSION', // written by another snapshot format version
  'SNAPSHOT_MISMATCH', // made with another model file, shape, KV type, policy or skew than the loaded one
  'SNAPSHOT_UNWRITABLE', // a snapshot could not be written: no such folder, permission, a full disk (details.reason)
  // arguments (command line, API, engine calls)
  'BAD_ARGUMENT',
  // anything else: a bug in Longhand
  'INTERNAL',
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

export type ErrorDetails = Readonly<Record<string, string | number | boolean | null | undefined>>;

export class LonghandError extends Error {
  readonly code: ErrorCode;
  readonly details: ErrorDetails;

  constructor(code: ErrorCode, message: string, details: ErrorDetails = {}, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'LonghandError';
    this.code = code;
    this.details = details;
  }

  /** Plain object for a protocol message or a JSON log line. */
  toJSON(): { code: ErrorCode; message: string; details: ErrorDetails } {
    return { code: this.code, message: this.message, details: this.details };
  }
}

/** A model file (or folder) that cannot be used. `file` names it; `offset` is where the reader stopped. */
export class ModelFileError extends LonghandError {
  readonly file: string;
  readonly offset: number | undefined;

  constructor(code: ErrorCode, file: string, message: string, details: ErrorDetails = {}, offset?: number) {
    const where = offset === undefined ? '' : ` (at byte ${offset})`;
    super(code, `${file}: ${message}${where}`, { ...details, file, offset }, undefined);
    this.name = 'ModelFileError';
    this.file = file;
    this.offset = offset;
  }
}

/** A failure reported by the native addon, mapped from its status code. */
export class NativeError extends LonghandError {
  constructor(code: ErrorCode, message: string, details: ErrorDetails = {}) {
    super(code, message, details);
    this.name = 'NativeError';
  }
}

/** Bad command-line, API or engine-call arguments. */
export class UsageError extends LonghandError {
  constructor(message: string, details: ErrorDetails = {}) {
    super('BAD_ARGUMENT', message, details);
    this.name = 'UsageError';
  }
}

export function isLonghandError(value: unknown): value is LonghandError {
  return value instanceof LonghandError;
}
