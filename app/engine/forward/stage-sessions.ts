// The L + 1 onnxruntime sessions of a model's stage graphs (graphs.ts), through the stage cache
// (stage-cache.ts) when there is one:
//
//   per stage s:  key(model sha256, s, options, hyper, onnxruntime, CPU, STAGE_GRAPH_VERSION)
//     ├─ hit  ──► session from the cached optimised graph (optimisation off; onnxruntime maps the
//     │           pre-packed weights): no buildStage, no repack, no MatMulNBits PrePack
//     │           └─ onnxruntime refuses it ──► entry removed, on as a miss
//     └─ miss ──► buildStage ──► session that also saves its optimised graph into a staging folder,
//                 its external file re-laid out with every blob 4 KiB aligned (external-data-align.ts)
//                 ──► the staged graph reloaded and run beside the session on a probe input:
//                     bit for bit the same ──► the entry published (one rename), then the session
//                     created from it kept (the saving one released); else the staged entry dropped
//                 └─ saving fails (full disk, unwritable folder) ──► session without saving, cache
//                    writes off for the rest of the load
//   then the least recently used entries beyond the cap are removed (never this load's).
//
// The cache only ever costs a load the time it spends on it: every cache failure is a miss or an
// entry not written, recorded in stats.problems. Only the CPU provider is cached: the optimised graph
// of another provider holds that provider's nodes and may not survive a reload the same way.
import { existsSync } from 'node:fs';
import path from 'node:path';
import { alignExternalData } from '../onnx/external-data-align.ts';
import type { LoadedModel, ModelHyperparameters } from '../model/types.ts';
import type { TensorData } from '../onnx/graph-builder.ts';
import type { LoadProgress } from '../../common/protocol.ts';
import { createSession, type EngineSession } from '../onnx/session.ts';
import { mallocTrim } from '../../../native/index.js';
import { buildStage, type StageGraph } from './graphs.ts';
import { modelDigest } from './model-digest.ts';
import { emptyStageCacheStats, GRAPH_FILE, StageCache, stageKey, WEIGHTS_FILE, type StageCacheStats } from './stage-cache.ts';
import type { ModelWeights } from './weights.ts';

export interface StageCacheOptions {
  /**
   * The engine's cache folder: entries under `<dir>/stages`, the model file's SHA-256 remembered in
   * `<dir>/model-sha256.json` (model-digest.ts; the first load of a file hashes it once).
   */
  dir: string;
  /** Most bytes the entries may take (default stage-cache.ts DEFAULT_STAGE_CACHE_BYTES, 8 GiB). */
  maxBytes?: number;
  /** The model file's SHA-256 when the caller knows it already. */
  modelSha256?: string;
}

export interface StageSessionOptions {
  threads: number;
  /** undefined: the CPU provider (the only one cached) */
  providers: string[] | undefined;
  /** per stage: does it output the next layer's speculative query */
  speculates: readonly boolean[];
  cache: StageCacheOptions | undefined;
  onProgress: ((progress: LoadProgress) => void) | undefined;
}

export interface StageSessions {
  sessions: EngineSession[];
  /** the graphs without their bytes (onnxruntime has its copy) */
  graphs: StageGraph[];
  graphWeightBytes: number;
  /** undefined: no cache was asked for, or not for this provider (a cache that could not be used: its problems) */
  cache: StageCacheStats | undefined;
}

const NO_BYTES = new Uint8Array(0);

export async function createStageSessions(model: LoadedModel, weights: ModelWeights, options: StageSessionOptions): Promise<StageSessions> {
  const hyper = model.hyper;
  const { threads, providers } = options;
  const cacheable = options.cache !== undefined && providers === undefined;
  const stats = cacheable ? emptyStageCacheStats() : undefined;
  const store = cacheable ? await StageCache.open(options.cache!.dir, options.cache!.maxBytes, stats) : undefined;
  let sha = options.cache?.modelSha256;
  if (store && sha === undefined) {
    try {
      sha = await modelDigest(model, options.cache!.dir);
    } catch (error) {
      stats!.problems.push(`stage cache off: the model file could not be hashed: ${message(error)}`);
    }
  }
  const cache = store && sha !== undefined ? store : undefined;
  let writing = cache !== undefined;
  const keep = new Set<string>(); // this load's entries: never evicted by it
  let keptBytes = 0;

  const sessions: EngineSession[] = [];
  const graphs: StageGraph[] = [];
  let graphWeightBytes = 0;
  const base = { intraOpThreads: threads, ...(providers ? { executionProviders: providers } : {}) };
  // on WebGPU the hidden state stays on the device from one layer graph to the next (step.ts feeds it
  // back): stages 1..L−1 output h_next (graphs.ts)
  const deviceResident = (s: number) => (providers && s >= 1 && s < hyper.layers ? { keepOnDevice: ['h_next'] } : {});
  try {
    for (let s = 0; s <= hyper.layers; s++) {
      const stageOptions = { speculateNext: options.speculates[s]! };
      const { key, keyText } = cache ? stageKey({ modelSha256: sha!, stage: s, ...stageOptions, accuracyLevel: weights.accuracyLevel, hyper }) : { key: '', keyText: '' };
      let session: EngineSession | undefined;
      let graph: StageGraph | undefined;
      const hit = cache ? await cache.lookup(key, keyText) : undefined;
      if (hit) {
        try {
          session = await createSession(hit.graphPath, { ...base, label: hit.name, graphOptimizationLevel: 'disabled' });
          graph = { name: hit.name, weightBytes: hit.weightBytes, inputs: hit.inputs, model: NO_BYTES };
          stats!.hits++;
          keep.add(key);
          keptBytes += hit.bytes;
        } catch (error) {
          await cache!.drop(key, `onnxruntime refused it: ${message(error)}`);
        }
      }
      if (!session) {
        if (cache) stats!.misses++;
        const built = buildStage(weights, s, stageOptions);
        let staged = writing ? await cache!.staging() : undefined;
        if (staged) {
          try {
            session = await createSession(built.model, { ...base, label: built.name, saveOptimized: { modelPath: path.join(staged, GRAPH_FILE), externalFile: WEIGHTS_FILE } });
          } catch (error) {
            // a full disk or an unwritable folder: onnxruntime fails the session that saves; try one that does not
            stats!.problems.push(`stage cache not written from stage ${s} on: ${message(error)}`);
            await cache!.discard(staged);
            staged = undefined;
            writing = false;
          }
        }
        session ??= await createSession(built.model, { ...base, ...deviceResident(s), label: built.name });
        graph = { ...built, model: NO_BYTES };
        if (staged) {
          const bytes = await cache!.stagedBytes(staged);
          if (keptBytes + bytes > cache!.maxBytes) {
            stats!.problems.push(`stage cache: this model's entries pass the cap of ${cache!.maxBytes} bytes at stage ${s}; the rest is not written`);
            await cache!.discard(staged);
            writing = false;
          } else {
            if (!(await alignedAndReloaded(session, staged, base, built, hyper, stats!))) {
              await cache!.discard(staged);
            } else {
              // published with no session on its files (Windows cannot rename a folder with open files)
              if (await cache!.publish(staged, key, keyText, graph)) {
                keep.add(key);
                keptBytes += bytes;
              }
              // then the session from the entry (ours, or the one another process published first): the one
              // that saved it holds ~ the stage's weights more (953M Q8_0: peak RSS 2483 MiB for the cold
              // load, 1617 without the cache); when the entry is not there, the saving session stays
              const warm = await createSession(path.join(cache!.entryPath(key), GRAPH_FILE), { ...base, label: built.name, graphOptimizationLevel: 'disabled' }).catch(() => undefined);
              if (warm) {
                await session.release();
                session = warm;
              }
            }
          }
        }
      }
      sessions.push(session);
      graphs.push(graph!);
      graphWeightBytes += graph!.weightBytes;
      // The weights onnxruntime freed after prepacking go back to the system now (glibc keeps them in
      // its heap otherwise: ~13 MiB per 56 MiB layer). Not by fixing the mmap threshold at 1 MiB: that
      // maps every large allocation afresh (page faults on each), measured on the 953M Q8_0 fixture as
      // load 19-24 s CPU instead of 13-15 and prefill 47-58 tok/s instead of 80-86, for the same RSS.
      mallocTrim();
      options.onProgress?.({ done: s + 1, total: hyper.layers + 1 });
    }
  } catch (error) {
    await Promise.all(sessions.map((x) => x.release()));
    throw error;
  }
  if (cache && stats!.stored > 0) await cache.enforceCap(keep);
  return { sessions, graphs, graphWeightBytes, cache: stats };
}

/** Aligns the staged entry's external file (external-data-align.ts); whether reloadedTheSame then holds. */
async function alignedAndReloaded(cold: EngineSession, staged: string, base: { intraOpThreads: number }, graph: StageGraph, hyper: ModelHyperparameters, stats: StageCacheStats): Promise<boolean> {
  try {
    if (existsSync(path.join(staged, WEIGHTS_FILE))) await alignExternalData(path.join(staged, GRAPH_FILE), WEIGHTS_FILE);
  } catch (error) {
    stats.problems.push(`stage cache: ${graph.name} not cached: ${message(error)}`);
    return false;
  }
  const warm = await reloadedTheSame(cold, staged, base, graph, hyper, stats);
  await warm?.release();
  return warm !== undefined;
}

/**
 * The session onnxruntime creates from the staged entry when it computes what `cold` computes, bit
 * for bit, on a small deterministic input (two positions); else undefined (released). Guards against
 * onnxruntime restoring a saved graph wrongly (it did: session.ts); a wrong entry would give wrong
 * text on every warm load. Exported for its test.
 */
export async function reloadedTheSame(cold: EngineSession, staged: string, base: { intraOpThreads: number }, graph: StageGraph, hyper: ModelHyperparameters, stats: StageCacheStats): Promise<EngineSession | undefined> {
  const T = 2;
  let seed = 12345;
  const values = (n: number): Float32Array => Float32Array.from({ length: n }, () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32) * 2 - 1);
  const all: Record<string, TensorData> = {
    h: { elemType: 'float32', dims: [1, T, hyper.hiddenSize], data: values(T * hyper.hiddenSize) },
    attn: { elemType: 'float32', dims: [1, T, hyper.heads * hyper.headDim], data: values(T * hyper.heads * hyper.headDim) },
    pos: { elemType: 'int64', dims: [1, T], data: BigInt64Array.of(0n, 1n) },
    rope_cos: { elemType: 'float32', dims: [T, hyper.headDim / 2], data: values((T * hyper.headDim) / 2) },
    rope_sin: { elemType: 'float32', dims: [T, hyper.headDim / 2], data: values((T * hyper.headDim) / 2) },
    spec_rope_cos: { elemType: 'float32', dims: [T, hyper.headDim / 2], data: values((T * hyper.headDim) / 2) },
    spec_rope_sin: { elemType: 'float32', dims: [T, hyper.headDim / 2], data: values((T * hyper.headDim) / 2) },
    rows: { elemType: 'int64', dims: [1], data: BigInt64Array.of(1n) },
  };
  const feeds: Record<string, TensorData> = {};
  for (const name of graph.inputs) feeds[name] = all[name]!;
  let warm: EngineSession | undefined;
  try {
    warm = await createSession(path.join(staged, GRAPH_FILE), { ...base, label: graph.name, graphOptimizationLevel: 'disabled' });
    const [want, got] = [await cold.run(feeds), await warm.run(feeds)];
    for (const [name, t] of Object.entries(want)) {
      const other = got[name];
      if (!other || !sameBytes(t.data, other.data)) {
        stats.problems.push(`stage cache: ${graph.name} reloaded by onnxruntime computes other ${name} values than the graph it saved; not cached`);
        await warm.release();
        return undefined;
      }
    }
    return warm;
  } catch (error) {
    stats.problems.push(`stage cache: ${graph.name} not cached: onnxruntime cannot reload what it saved: ${message(error)}`);
    await warm?.release();
    return undefined;
  }
}

function sameBytes(a: ArrayBufferView, b: ArrayBufferView): boolean {
  if (a.byteLength !== b.byteLength) return false;
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
