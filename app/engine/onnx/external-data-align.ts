// Re-lays out the external-data file of a model onnxruntime saved (session.ts saveOptimized) so that
// every initializer and every pre-packed blob in it starts on a 4 KiB boundary, and rewrites the
// model's offsets to match.
//
// Why: onnxruntime 1.30 writes the blobs back to back at whatever offset they fall on, then maps the
// file on reload and hands each kernel a pointer into the mapping. MLAS's MatMulNBits layout under
// accuracy level 4 (CompInt8) places its scale and block-sum sections at addresses it aligns from
// the buffer's own address, so a blob packed in an aligned allocation and mapped back at an offset
// that is not a multiple of 64 is read with its sections shifted: garbage (session.test.ts shows it
// with a blob at offset 9312; the same blob at 9216 is restored bit for bit).
//
// The model file is walked at the protobuf wire level along the only path onnxruntime writes
// external data to: ModelProto.graph (7) → GraphProto.initializer (5) → TensorProto.external_data
// (13) → StringStringEntryProto { key (1), value (2) }, with keys `offset`, `length` and
// `prepacked_<i>` = "<blob key>|<offset>;<length>;<flag>". Any other field is copied as it is. A
// file this does not understand (an offset it cannot parse, regions that overlap) is an OnnxError;
// the caller then does not use the saved model.
import { open, readFile, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { OnnxError } from './errors.ts';
import { ProtoWriter } from './onnx-proto.ts';

export const EXTERNAL_DATA_ALIGNMENT = 4096;

interface Field {
  field: number;
  wireType: number;
  /** the whole field as encoded (tag, length, payload) */
  raw: Uint8Array;
  /** length-delimited fields: the payload */
  payload?: Uint8Array;
}

function readVarint(buf: Uint8Array, at: number): [value: number, next: number] {
  let value = 0;
  let scale = 1;
  for (let i = at; i < buf.length && i < at + 10; i++) {
    const b = buf[i]!;
    value += (b & 0x7f) * scale;
    scale *= 128;
    if ((b & 0x80) === 0) return [value, i + 1];
  }
  throw new OnnxError('ONNX_SESSION_FAILED', 'saved model: malformed protobuf varint', { at });
}

function parseFields(buf: Uint8Array): Field[] {
  const fields: Field[] = [];
  let at = 0;
  while (at < buf.length) {
    const start = at;
    const [tag, afterTag] = readVarint(buf, at);
    const field = Math.floor(tag / 8);
    const wireType = tag % 8;
    at = afterTag;
    let payload: Uint8Array | undefined;
    if (wireType === 0) at = readVarint(buf, at)[1];
    else if (wireType === 1) at += 8;
    else if (wireType === 5) at += 4;
    else if (wireType === 2) {
      const [len, afterLen] = readVarint(buf, at);
      payload = buf.subarray(afterLen, afterLen + len);
      at = afterLen + len;
    } else throw new OnnxError('ONNX_SESSION_FAILED', `saved model: protobuf wire type ${wireType} is not expected here`, { field });
    if (at > buf.length) throw new OnnxError('ONNX_SESSION_FAILED', 'saved model: protobuf field runs past its message', { field });
    fields.push({ field, wireType, raw: buf.subarray(start, at), ...(payload ? { payload } : {}) });
  }
  return fields;
}

/** A message made of `fields`, each either copied as it was encoded or a length-delimited field rewritten. */
function message(fields: readonly (Uint8Array | { field: number; payload: Uint8Array })[]): Uint8Array {
  const w = new ProtoWriter();
  for (const f of fields) {
    if (f instanceof Uint8Array) w.raw(f);
    else w.bytesField(f.field, f.payload);
  }
  return w.finish();
}

/** Rewrites the length-delimited fields numbered `field` of a message with `fn`; the rest is copied. */
function mapField(msg: Uint8Array, field: number, fn: (payload: Uint8Array) => Uint8Array): Uint8Array {
  return message(parseFields(msg).map((f) => (f.field === field && f.payload ? { field, payload: fn(f.payload) } : f.raw)));
}

const text = new TextDecoder();
const utf8 = new TextEncoder();

/** One stretch of the external file: an initializer's bytes or a pre-packed blob. */
interface Region {
  offset: number;
  length: number;
}

type EntryVisitor = (key: string, value: string) => string;

/** Calls `visit` on every external_data entry of every initializer (its return value replaces the value). */
function visitEntries(model: Uint8Array, visit: EntryVisitor): Uint8Array {
  return mapField(model, 7, (graph) =>
    mapField(graph, 5, (tensor) =>
      mapField(tensor, 13, (entry) => {
        const fields = parseFields(entry);
        const key = text.decode(fields.find((f) => f.field === 1)?.payload ?? new Uint8Array(0));
        const value = text.decode(fields.find((f) => f.field === 2)?.payload ?? new Uint8Array(0));
        const next = visit(key, value);
        if (next === value) return entry;
        return message(fields.map((f) => (f.field === 2 ? { field: 2, payload: utf8.encode(next) } : f.raw)));
      }),
    ),
  );
}

const PREPACKED = /^(.*)\|(\d+);(\d+);(.*)$/;

function parseOffset(s: string, what: string): number {
  if (!/^\d+$/.test(s)) throw new OnnxError('ONNX_SESSION_FAILED', `saved model: ${what} '${s}' is not a byte offset`, { value: s });
  return Number(s);
}

/**
 * Rewrites `<dir>/<model>` and its external file `<dir>/<externalFile>` so that every region
 * starts on an EXTERNAL_DATA_ALIGNMENT boundary (the regions keep their order and bytes). The
 * model's initializers must all live in that one file.
 */
export async function alignExternalData(modelPath: string, externalFile: string): Promise<void> {
  const model = new Uint8Array(await readFile(modelPath));
  // pass 1: every region (an initializer's offset+length, each pre-packed blob)
  const regions = new Map<number, number>();
  let pendingOffset: number | undefined;
  visitEntries(model, (key, value) => {
    if (key === 'location' && value !== externalFile) {
      throw new OnnxError('ONNX_SESSION_FAILED', `saved model: an initializer lives in '${value}', not in ${externalFile}`, { location: value });
    }
    if (key === 'offset') pendingOffset = parseOffset(value, 'offset');
    else if (key === 'length') {
      regions.set(pendingOffset ?? 0, parseOffset(value, 'length'));
      pendingOffset = undefined;
    } else if (key.startsWith('prepacked_')) {
      const m = PREPACKED.exec(value);
      if (!m) throw new OnnxError('ONNX_SESSION_FAILED', `saved model: pre-packed entry '${value}' is not key|offset;length;flag`, { value });
      regions.set(parseOffset(m[2]!, 'blob offset'), parseOffset(m[3]!, 'blob length'));
    }
    return value;
  });
  // new offsets, in file order
  const sorted: Region[] = [...regions].map(([offset, length]) => ({ offset, length })).sort((a, b) => a.offset - b.offset);
  const moved = new Map<number, number>();
  let end = 0;
  let lastEnd = 0;
  for (const r of sorted) {
    if (r.offset < lastEnd) throw new OnnxError('ONNX_SESSION_FAILED', `saved model: external regions overlap at byte ${r.offset}`, { offset: r.offset });
    lastEnd = r.offset + r.length;
    const at = Math.ceil(end / EXTERNAL_DATA_ALIGNMENT) * EXTERNAL_DATA_ALIGNMENT;
    moved.set(r.offset, at);
    end = at + r.length;
  }
  // pass 2: the model with the new offsets (an initializer's offset entry precedes its length; a
  // missing offset means 0, which stays 0: the first region starts the file)
  const rewritten = visitEntries(model, (key, value) => {
    if (key === 'offset') return String(moved.get(Number(value))!);
    if (key.startsWith('prepacked_')) {
      const m = PREPACKED.exec(value)!;
      return `${m[1]}|${moved.get(Number(m[2]))!};${m[3]};${m[4]}`;
    }
    return value;
  });
  // the external file, region by region, into a new file beside it
  const dir = path.dirname(modelPath);
  const src = path.join(dir, externalFile);
  const tmp = `${src}.aligned`;
  const input = await open(src, 'r');
  const output = await open(tmp, 'w');
  try {
    const chunk = Buffer.alloc(4 << 20);
    for (const r of sorted) {
      let done = 0;
      while (done < r.length) {
        const n = Math.min(chunk.length, r.length - done);
        const { bytesRead } = await input.read(chunk, 0, n, r.offset + done);
        if (bytesRead !== n) throw new OnnxError('ONNX_SESSION_FAILED', `saved model: ${externalFile} ends inside a region at byte ${r.offset + done}`, { offset: r.offset });
        await output.write(chunk, 0, n, moved.get(r.offset)! + done);
        done += n;
      }
    }
  } catch (error) {
    await output.close();
    await input.close();
    await rm(tmp, { force: true });
    throw error;
  }
  await output.close();
  await input.close();
  await rename(tmp, src);
  await writeFile(modelPath, rewritten);
}
