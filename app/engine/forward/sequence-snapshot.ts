// A cached sequence on disk and back (issue 10 §3): the token ids, every layer's K/V rows exactly as
// the pool holds them, and InfiniGen's column energies, in the checked file format of
// app/engine/kv/snapshot-file.ts.
//
//   save: n = the exact prefix (tokens a prefill of the same text would compute too, cut back to a
//         point where every policy state is exact) ─► sections 'ids' (int32 [n]), 'layer.ℓ' (the
//         pool's packed rows of layer ℓ, one layer in memory at a time: every token of a global
//         layer, the window before n of a sliding-window layer's ring, from the ring or from its
//         checkpoint at n, kv/ring-checkpoints.ts), 'infinigen' (float64 energies, under InfiniGen),
//         'policy.<name>' (H2O's accumulated mass, SnapKV's window queries at n, under those
//         policies: their state is not in the rows), 'recurrent.ℓ' (a linear-attention layer's
//         state at n: Qwen3.5; its 'layer.ℓ' is empty) ─► written atomically
//   restore: open (bounds, version) ─► the meta must fit the loaded model: file sha256, shape,
//         vocabulary, KV type; under InfiniGen also its sparse layers, r and the skew ─► ids checked
//         against the vocabulary ─► each layer's section read (sha256 checked) straight into the
//         pool's import, the linear-attention states (read and checked first) into the runner's
//         ─► nothing is recomputed
// What fits: the rows are the dense ones whatever policy was running, so a snapshot restores under
// any policy with the same model and KV type; InfiniGen needs the energies, so it restores only
// snapshots written under InfiniGen with the same denseLayers, partialRatio and skew; H2O and SnapKV
// need their own state (written under the same policy, covering their sparse layers, SnapKV's window
// at most the one written), else the snapshot is refused (SNAPSHOT_MISMATCH, reason 'policy') and
// the prompt is prefilled: a snapshot written before they had one (same format version, no such
// sections) is refused that way too.
import { LonghandError } from '../../common/errors.ts';
import { checkSnapshotFits, openSnapshotFile, writeSnapshotFile, type SectionSource, type SnapshotMeta, type SnapshotReader } from '../kv/snapshot-file.ts';
import type { CachedSequence } from './cached-sequence.ts';
import type { InfinigenSequenceState } from './policy/infinigen-state.ts';
import type { PolicySequenceState } from './policy/row-policy.ts';

/** What the loaded model is, for the snapshot's meta and the restore check. */
export interface SnapshotIdentity {
  modelSha256: string;
  architecture: string;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  vocabSize: number;
  kvType: SnapshotMeta['kvType'];
  policy: string;
  /** the knobs the policy's snapshot state depends on (InfiniGen: denseLayers, partialRatio) */
  knobs: Record<string, unknown>;
}

const INFINIGEN_SECTION = 'infinigen';
/** 'policy.<name>.shape' (JSON: layers, rows, width) and 'policy.<name>.data' (float32 [layers, rows, width]) */
const POLICY_SECTION = 'policy';

export async function saveSequenceSnapshot(path: string, sequence: CachedSequence, identity: SnapshotIdentity): Promise<{ tokens: number; bytes: number }> {
  const runner = sequence.runner;
  const n = runner.resumePoint(sequence.exactTokens);
  const ids = Int32Array.from(sequence.tokens.slice(0, n)); // [n]
  const skew = await runner.skewId();
  const ig = runner.exportInfinigen(n);
  const own = runner.exportPolicyState(n);
  // layers may differ in row shape (Gemma 4), a ring's section is its window's, a KV-shared layer's is empty
  const layerBytes = Array.from({ length: identity.layers }, (_, l) => runner.snapshotLayerBytes(n, l));
  const buffer = new Uint8Array(Math.max(0, ...layerBytes)); // one layer's packed rows, reused for every layer
  const sections: SectionSource[] = [{ name: 'ids', bytes: ids.byteLength, read: () => new Uint8Array(ids.buffer) }];
  for (let l = 0; l < identity.layers; l++) {
    const bytes = layerBytes[l]!;
    sections.push({
      name: `layer.${l}`,
      bytes,
      read: () => {
        const into = buffer.subarray(0, bytes);
        runner.exportLayer(l, n, into);
        return into;
      },
    });
  }
  for (const { layer, floats } of runner.recurrentLayers()) {
    sections.push({ name: `${RECURRENT_SECTION}.${layer}`, bytes: floats * 4, read: () => new Uint8Array(runner.exportRecurrent(layer, n).buffer) });
  }
  if (ig) sections.push(...infinigenSections(ig));
  if (own) sections.push(...policySections(own));
  const meta: SnapshotMeta = { ...identity, skew, tokens: n, createdAt: new Date().toISOString() };
  const { bytes } = await writeSnapshotFile(path, meta, sections);
  return { tokens: n, bytes };
}

/** The ids a snapshot holds, after checking that it fits, its policy state included (`needs`: runner.policyStateNeeds()), for choosing whether to restore it. */
export async function peekSequenceSnapshot(path: string, identity: SnapshotIdentity, skew: string | null, needs?: { policy: string; layers: number[] }): Promise<number[]> {
  const reader = await openSnapshotFile(path);
  try {
    const ids = await checkedIds(reader, identity, skew);
    if (needs && ids.length > 0) await readPolicyState(reader, path, needs, false);
    return ids;
  } finally {
    await reader.close();
  }
}

/**
 * Replaces the cached sequence with the snapshot's. Throws a SNAPSHOT_* LonghandError when it does
 * not fit or is damaged; the cache is then empty if any row was read, else untouched.
 */
export async function restoreSequenceSnapshot(path: string, sequence: CachedSequence, identity: SnapshotIdentity): Promise<{ tokens: number; bytes: number }> {
  const runner = sequence.runner;
  const reader = await openSnapshotFile(path);
  try {
    const ids = await checkedIds(reader, identity, await runner.skewId());
    const n = ids.length;
    for (let l = 0; l < identity.layers; l++) {
      const want = runner.snapshotLayerBytes(n, l);
      const found = reader.sections.find((s) => s.name === `layer.${l}`);
      if (!found || found.bytes !== want) throw corrupt(path, `section layer.${l} has ${found?.bytes ?? 'no'} bytes, ${want} expected for ${n} tokens`);
    }
    const ig = identity.policy === 'infinigen' ? await readInfinigen(reader, path) : undefined;
    const needs = runner.policyStateNeeds();
    const own = needs && n > 0 ? await readPolicyState(reader, path, needs, true) : undefined;
    // read and checked before the cache is touched, like the rest
    const recurrent = runner.recurrentLayers().length > 0 ? await readRecurrent(reader, path, runner.recurrentLayers()) : undefined;
    sequence.clear();
    try {
      await runner.importSequence(n, async (l, into) => void (await reader.readSection(`layer.${l}`, into)), ig, own);
      if (recurrent) runner.importRecurrent(n, recurrent);
    } catch (error) {
      sequence.clear();
      if (error instanceof LonghandError && error.code.startsWith('SNAPSHOT_')) throw error;
      // the pool refused the rows (positions, sizes): the file is damaged in a way the checksums missed
      throw corrupt(path, `the pool refused its rows: ${error instanceof Error ? error.message : String(error)}`);
    }
    sequence.adoptRestored(ids);
    return { tokens: n, bytes: reader.fileBytes };
  } finally {
    await reader.close();
  }
}

/**
 * A model with linear-attention layers (Qwen3.5) keeps a state per such layer instead of rows:
 * section 'recurrent.<ℓ>' holds layer ℓ's, float32 (linear-attention.ts: its matrices, then its
 * convolution tail) at the snapshot's tokens. Restoring checks each is there with its size and
 * finite values (SNAPSHOT_CORRUPT otherwise; the checksums cover the bytes).
 */
const RECURRENT_SECTION = 'recurrent';

async function readRecurrent(reader: SnapshotReader, path: string, layers: readonly { layer: number; floats: number }[]): Promise<Map<number, Float32Array>> {
  const out = new Map<number, Float32Array>();
  for (const { layer, floats } of layers) {
    const name = `${RECURRENT_SECTION}.${layer}`;
    const found = reader.sections.find((x) => x.name === name);
    if (!found || found.bytes !== floats * 4) throw corrupt(path, `section ${name} has ${found?.bytes ?? 'no'} bytes, ${floats * 4} expected (the linear-attention state of layer ${layer})`);
    const data = new Float32Array(floats);
    await reader.readSection(name, new Uint8Array(data.buffer));
    if (data.some((x) => !Number.isFinite(x))) throw corrupt(path, `section ${name} holds a non-finite value`);
    out.set(layer, data);
  }
  return out;
}

async function checkedIds(reader: SnapshotReader, identity: SnapshotIdentity, skew: string | null): Promise<number[]> {
  const meta = reader.meta;
  const infinigen = identity.policy === 'infinigen';
  // rows are dense under every policy: only InfiniGen's own state makes the policy and skew matter
  checkSnapshotFits(meta, {
    ...identity,
    policy: infinigen ? identity.policy : meta.policy,
    knobs: infinigen ? identity.knobs : meta.knobs,
    skew: infinigen ? skew : meta.skew,
  });
  const bytes = await reader.readSection('ids');
  if (bytes.byteLength !== meta.tokens * 4) throw corrupt(reader.path, `section ids has ${bytes.byteLength} bytes for ${meta.tokens} tokens`);
  const ids = Array.from(new Int32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength)));
  const bad = ids.findIndex((id) => id < 0 || id >= identity.vocabSize);
  if (bad >= 0) throw corrupt(reader.path, `token ${bad} has id ${ids[bad]}, outside the vocabulary of ${identity.vocabSize}`);
  return ids;
}

/** InfiniGen's state as two sections: a small JSON of positions and the float64 energies. */
function infinigenSections(ig: InfinigenSequenceState): SectionSource[] {
  const head = new TextEncoder().encode(JSON.stringify({ observed: ig.observed, checkpoints: ig.checkpoints, values: ig.data.length }));
  const data = new Uint8Array(ig.data.buffer, ig.data.byteOffset, ig.data.byteLength);
  return [
    { name: `${INFINIGEN_SECTION}.positions`, bytes: head.byteLength, read: () => head },
    { name: `${INFINIGEN_SECTION}.energies`, bytes: data.byteLength, read: () => data },
  ];
}

async function readInfinigen(reader: SnapshotReader, path: string): Promise<InfinigenSequenceState> {
  const has = (name: string): boolean => reader.sections.some((s) => s.name === name);
  if (!has(`${INFINIGEN_SECTION}.positions`) || !has(`${INFINIGEN_SECTION}.energies`)) {
    throw new LonghandError('SNAPSHOT_MISMATCH', `${path}: the snapshot has no InfiniGen state (written under another policy); InfiniGen needs it`, { reason: 'policy', path });
  }
  let head: unknown;
  try {
    head = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(await reader.readSection(`${INFINIGEN_SECTION}.positions`)));
  } catch (error) {
    if (error instanceof LonghandError) throw error;
    throw corrupt(path, 'the InfiniGen positions section is not JSON');
  }
  const h = head as { observed?: unknown; checkpoints?: unknown; values?: unknown };
  const meta = reader.meta;
  const okInt = (v: unknown, max: number): v is number => Number.isSafeInteger(v) && (v as number) >= 0 && (v as number) <= max;
  if (!okInt(h.observed, meta.tokens) || !Array.isArray(h.checkpoints) || !okInt(h.values, 2 ** 31) || h.checkpoints.length > meta.tokens) throw corrupt(path, 'the InfiniGen positions section has bad fields');
  const checkpoints = h.checkpoints as unknown[];
  if (!checkpoints.every((c, i) => okInt(c, meta.tokens) && (i === 0 || (c as number) > (checkpoints[i - 1] as number)))) throw corrupt(path, 'the InfiniGen checkpoints are not ascending positions');
  const bytes = await reader.readSection(`${INFINIGEN_SECTION}.energies`);
  if (bytes.byteLength !== h.values * 8) throw corrupt(path, `the InfiniGen energies have ${bytes.byteLength} bytes, ${h.values * 8} declared`);
  const data = new Float64Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
  if (data.some((x) => !Number.isFinite(x) || x < 0)) throw corrupt(path, 'the InfiniGen energies hold a negative or non-finite value');
  return { observed: h.observed, checkpoints: checkpoints as number[], data };
}

/** A comparison policy's own state as two sections: its shape (JSON) and the float32 values. */
function policySections(state: PolicySequenceState): SectionSource[] {
  const head = new TextEncoder().encode(JSON.stringify({ layers: state.layers, rows: state.rows, width: state.width }));
  const data = new Uint8Array(state.data.buffer, state.data.byteOffset, state.data.byteLength);
  return [
    { name: `${POLICY_SECTION}.${state.policy}.shape`, bytes: head.byteLength, read: () => head },
    { name: `${POLICY_SECTION}.${state.policy}.data`, bytes: data.byteLength, read: () => data },
  ];
}

/**
 * The state the running policy needs (policyStateNeeds): refused as a mismatch when the snapshot has
 * none (written under another policy, or before policies kept one) or lacks a sparse layer's; as
 * damage when its sections disagree with each other. The policy checks the rest when it imports.
 */
async function readPolicyState(reader: SnapshotReader, path: string, needs: { policy: string; layers: number[] }, withData: true): Promise<PolicySequenceState>;
async function readPolicyState(reader: SnapshotReader, path: string, needs: { policy: string; layers: number[] }, withData: false): Promise<undefined>;
async function readPolicyState(reader: SnapshotReader, path: string, needs: { policy: string; layers: number[] }, withData: boolean): Promise<PolicySequenceState | undefined> {
  const shapeName = `${POLICY_SECTION}.${needs.policy}.shape`;
  const dataName = `${POLICY_SECTION}.${needs.policy}.data`;
  const has = (name: string): boolean => reader.sections.some((s) => s.name === name);
  if (!has(shapeName) || !has(dataName)) {
    throw new LonghandError('SNAPSHOT_MISMATCH', `${path}: the snapshot has no ${needs.policy} state (written under ${reader.meta.policy}, or by an older Longhand); ${needs.policy} needs it to continue like a fresh run`, { reason: 'policy', path });
  }
  let head: unknown;
  try {
    head = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(await reader.readSection(shapeName)));
  } catch (error) {
    if (error instanceof LonghandError) throw error;
    throw corrupt(path, `the ${needs.policy} state's shape section is not JSON`);
  }
  const h = head as { layers?: unknown; rows?: unknown; width?: unknown };
  const okInt = (v: unknown, max: number): v is number => Number.isSafeInteger(v) && (v as number) >= 0 && (v as number) <= max;
  const layers = h.layers;
  if (!Array.isArray(layers) || !layers.every((l, i) => okInt(l, 1 << 16) && (i === 0 || (l as number) > (layers[i - 1] as number))) || !okInt(h.rows, 2 ** 31) || !okInt(h.width, 2 ** 31)) {
    throw corrupt(path, `the ${needs.policy} state's shape section has bad fields`);
  }
  const missing = needs.layers.filter((l) => !layers.includes(l));
  if (missing.length > 0) throw new LonghandError('SNAPSHOT_MISMATCH', `${path}: the snapshot's ${needs.policy} state has no layer ${missing.join(', ')} (written with other denseLayers)`, { reason: 'policy', path });
  if (!withData) return undefined;
  const bytes = await reader.readSection(dataName);
  const values = layers.length * h.rows * h.width;
  if (bytes.byteLength !== values * 4) throw corrupt(path, `the ${needs.policy} state has ${bytes.byteLength} bytes, ${values * 4} declared`);
  const data = new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
  if (data.some((x) => !Number.isFinite(x))) throw corrupt(path, `the ${needs.policy} state holds a non-finite value`);
  return { policy: needs.policy, layers: layers as number[], rows: h.rows, width: h.width, data };
}

function corrupt(path: string, why: string): LonghandError {
  return new LonghandError('SNAPSHOT_CORRUPT', `${path}: KV snapshot is damaged: ${why}`, { reason: 'layout', path });
}
