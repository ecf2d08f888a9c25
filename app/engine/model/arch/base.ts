// Shared machinery for per-architecture tensor tables: renaming Hugging Face tensors to the
// canonical (GGUF-style) names, and checking that every tensor the hyperparameters call for is
// there with the right shape. Each family (llama.ts, opt.ts) supplies only its tables.
import { ModelFileError } from '../../../common/errors.ts';
import type { Architecture, ModelHyperparameters, TensorView } from '../types.ts';

/** A tensor the model needs, with its shape outermost-first (PyTorch order). */
export interface ExpectedTensor {
  readonly name: string;
  readonly shape: readonly number[];
}

export interface ArchTensorTable {
  readonly architecture: Architecture;
  /** Canonical name of a Hugging Face tensor, or undefined when the model does not use it. */
  canonicalName(hfName: string): string | undefined;
  /** Every tensor the model needs given its hyperparameters. */
  expectedTensors(hyper: ModelHyperparameters): ExpectedTensor[];
}

export interface NameTables {
  /** Prefixes stripped (in order, each at most once) before lookup, e.g. 'model.', 'decoder.'. */
  prefixes: readonly string[];
  /** Whole-model tensors: stripped HF name → canonical name. */
  global: Readonly<Record<string, string>>;
  /** Per-layer tensors: HF suffix after `layers.N.` → canonical suffix after `blk.N.`. */
  layer: Readonly<Record<string, string>>;
}

const LAYER = /^layers\.(0|[1-9][0-9]{0,5})\.(.+)$/;

/** Looks a Hugging Face name up in the tables. */
export function mapName(tables: NameTables, hfName: string): string | undefined {
  let name = hfName;
  for (const prefix of tables.prefixes) {
    if (name.startsWith(prefix)) name = name.slice(prefix.length);
  }
  const global = Object.hasOwn(tables.global, name) ? tables.global[name] : undefined;
  if (global !== undefined) return global;
  const match = LAYER.exec(name);
  if (match === null) return undefined;
  const suffix = match[2] as string;
  const canonical = Object.hasOwn(tables.layer, suffix) ? tables.layer[suffix] : undefined;
  return canonical === undefined ? undefined : `blk.${match[1]}.${canonical}`;
}

/** A view under another name (same bytes). */
export function renameTensor(view: TensorView, name: string): TensorView {
  return {
    name,
    dtype: view.dtype,
    shape: view.shape,
    elements: view.elements,
    bytes: () => view.bytes(),
    toFloat32: () => view.toFloat32(),
  };
}

/** Renames the tensors the architecture uses; two HF names for one canonical name is an error. */
export function canonicalTensors(table: ArchTensorTable, tensors: ReadonlyMap<string, TensorView>, where: string): Map<string, TensorView> {
  const out = new Map<string, TensorView>();
  const source = new Map<string, string>();
  for (const [hfName, view] of tensors) {
    const name = table.canonicalName(hfName);
    if (name === undefined) continue;
    const previous = source.get(name);
    if (previous !== undefined) {
      throw new ModelFileError('MODEL_DUPLICATE_KEY', where, `tensors '${previous}' and '${hfName}' are both ${name}`, { tensor: name, first: previous, second: hfName });
    }
    source.set(name, hfName);
    out.set(name, renameTensor(view, name));
  }
  return out;
}

/** Presence and shape of every expected tensor. */
export function checkTensors(table: ArchTensorTable, hyper: ModelHyperparameters, tensors: ReadonlyMap<string, TensorView>, where: string): void {
  for (const expected of table.expectedTensors(hyper)) {
    const view = tensors.get(expected.name);
    if (view === undefined) {
      throw new ModelFileError('MODEL_MISSING_TENSOR', where, `tensor ${expected.name} is missing (${hyper.family}, ${hyper.layers} layers)`, { tensor: expected.name });
    }
    const same = view.shape.length === expected.shape.length && view.shape.every((dim, axis) => dim === expected.shape[axis]);
    if (!same) {
      throw new ModelFileError(
        'MODEL_SHAPE_MISMATCH',
        where,
        `tensor ${expected.name} has shape [${view.shape.join(', ')}], expected [${expected.shape.join(', ')}] from the hyperparameters`,
        { tensor: expected.name, expected: `[${expected.shape.join(', ')}]`, actual: `[${view.shape.join(', ')}]` },
      );
    }
  }
}

/** `blk.N.<suffix>` for every layer. */
export function perLayer(layers: number, make: (prefix: string) => ExpectedTensor[]): ExpectedTensor[] {
  const out: ExpectedTensor[] = [];
  for (let layer = 0; layer < layers; layer++) out.push(...make(`blk.${layer}.`));
  return out;
}
