// The on-disk cache of onnxruntime's optimised stage graphs with their pre-packed weights
// (issue 11 part 2): a warm load maps these instead of repacking the GGUF and letting MatMulNBits
// pack again (bench/load-stages.mjs --runner, 2 threads, load average ~1: the 953M Q8_0 fixture
// loads in 2.4–2.5 s instead of 12.5 s; llama.cpp 3.5 s). Writing the entries makes the first load
// of a model and settings about twice as long (23 s): onnxruntime writes ~2 GB (the weights as given
// and their pre-packed copy), the file is re-laid out aligned, and each stage is reloaded and checked.
//
//   <cacheDir>/stages/<key>/            one entry per stage graph; <key> = sha256 of the key text
//       manifest.json                   key text, name, weightBytes, inputs, every file's size + check
//       stage.onnx                      onnxruntime's optimised graph (small initializers inline)
//       stage.bin                       its initializers of >= 1 KiB and the kernels' pre-packed blobs,
//                                       each on a 4 KiB boundary (onnxruntime 1.30 does not align them,
//                                       and MatMulNBits under accuracy level 4 misreads unaligned ones:
//                                       onnx/external-data-align.ts)
//   <cacheDir>/stages/.tmp-<pid>-<rand>/  an entry being written (renamed to <key> when complete)
//   <cacheDir>/stages/.trash-<rand>/      an entry being removed (renamed away first, then deleted)
//
// Key: everything the optimised graph depends on — the model file's SHA-256, the stage index, the
// stage options (speculateNext; the RoPE rows are fed per run, so one entry serves every context length), MatMulNBits' accuracy level, the hyperparameters as
// parsed, onnxruntime's version, the CPU (onnxruntime warns that an optimised model "may contain
// hardware specific optimizations": MLAS picks its packing by the instruction set) and
// STAGE_GRAPH_VERSION, which graphs.ts's author bumps when a stage graph changes (a test records
// stories260K's stage bytes and fails until they do).
//
// Atomicity: a reader only ever sees complete entries, because an entry appears by one rename of a
// folder written in full; a second writer of the same key loses the rename (the folder exists and is
// not empty) and deletes its own copy. Removal renames the entry away before deleting it. A session
// already created from an entry keeps working when the entry is removed (its files stay open).
//
// Trust: onnxruntime itself refuses a missing or truncated external file (it checks every
// initializer's offset and length against the file's size) and an unparsable graph, but maps a
// file whose bytes were changed in place without complaint. So the manifest records each file's
// size, the whole graph file's SHA-256 (it is a few KB) and the SHA-256 of 16 spread 4 KiB blocks of
// the weights file (a zero-filled or foreign file of the right size fails it; hashing the whole file
// would cost ~3.6 s per GB on every load). Anything that does not match is removed and rebuilt;
// nothing the cache does can fail a load (callers treat every cache error as a miss).
//
// Size: at most maxBytes (default 8 GiB, about two 1 GB models: an entry holds the weights as given
// and their pre-packed copy) — least recently used entries go first; an entry's last use is its
// manifest's mtime, set on every hit.
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdir, open, readdir, readFile, rename, rm, stat, utimes, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { ModelHyperparameters } from '../model/types.ts';
import { onnxruntimeVersion } from '../onnx/session.ts';
import { STAGE_INPUTS, type StageGraph } from './graphs.ts';
import type { AccuracyLevel } from './weights.ts';

/**
 * Bump when buildStage's output changes for the same model and options (the families' graphs in
 * layers/*-graph.ts and layers/stage-graph.ts, onnx/ops.ts, the graph builder, the repack):
 * entries written for the old graphs are then never looked up again.
 */
export const STAGE_GRAPH_VERSION = 2;
/** The folder under the engine's cache folder. */
export const STAGE_CACHE_FOLDER = 'stages';
export const DEFAULT_STAGE_CACHE_BYTES = 8 * 2 ** 30;
export const MANIFEST_FILE = 'manifest.json';
export const GRAPH_FILE = 'stage.onnx';
export const WEIGHTS_FILE = 'stage.bin';
/** Writers' folders older than this are left over from a crash. */
const STALE_TMP_MS = 60 * 60 * 1000;
const SAMPLE_BLOCKS = 16;
const SAMPLE_BYTES = 4096;

/** What a stage graph is built from, besides the code (STAGE_GRAPH_VERSION) and the machine. */
export interface StageKeyParts {
  modelSha256: string;
  stage: number;
  speculateNext: boolean;
  accuracyLevel: AccuracyLevel;
  hyper: ModelHyperparameters;
}

/** A cached stage: what the runner needs of its graph without building it, and where it is. */
export interface CachedStage extends Omit<StageGraph, 'model'> {
  key: string;
  /** the optimised graph; create its session with graph optimisation off */
  graphPath: string;
  /** bytes on disk */
  bytes: number;
}

interface FileCheck {
  size: number;
  /** sha256 of the whole file (the graph) or of SAMPLE_BLOCKS spread blocks (the weights) */
  sha256: string;
}

interface Manifest {
  version: 1;
  keyText: string;
  name: string;
  weightBytes: number;
  inputs: StageGraph['inputs'];
  files: Record<string, FileCheck>;
}

/** The CPU as far as MLAS's choice of kernels and packings goes: architecture, model and feature flags. */
let cpu: string | undefined;
function cpuIdentity(): string {
  if (cpu !== undefined) return cpu;
  let flags = '';
  try {
    const info = readFileSync('/proc/cpuinfo', 'utf8');
    flags = /^(?:flags|Features)\s*:(.*)$/m.exec(info)?.[1]?.trim() ?? '';
  } catch {
    // not Linux: the model name and architecture stand for the instruction set
  }
  cpu = `${process.platform}|${process.arch}|${os.cpus()[0]?.model ?? '?'}|${flags}`;
  return cpu;
}

/** The key's text (recorded in the manifest, compared on lookup) and its hash (the entry's folder name). */
export function stageKey(parts: StageKeyParts): { key: string; keyText: string } {
  const keyText = JSON.stringify({
    format: STAGE_GRAPH_VERSION,
    onnxruntime: onnxruntimeVersion(),
    cpu: cpuIdentity(),
    model: parts.modelSha256,
    stage: parts.stage,
    speculateNext: parts.speculateNext,
    accuracyLevel: parts.accuracyLevel,
    hyper: parts.hyper,
  });
  return { key: createHash('sha256').update(keyText).digest('hex'), keyText };
}

const isKey = (name: string): boolean => /^[0-9a-f]{64}$/.test(name);

async function sha256Whole(file: string): Promise<string> {
  return createHash('sha256').update(await readFile(file)).digest('hex');
}

/** sha256 of SAMPLE_BLOCKS blocks spread from the first byte to the last (the size is hashed too). */
async function sha256Sampled(file: string, size: number): Promise<string> {
  const hash = createHash('sha256').update(String(size));
  const fd = await open(file, 'r');
  try {
    const block = Buffer.alloc(SAMPLE_BYTES);
    const span = Math.max(0, size - SAMPLE_BYTES);
    for (let i = 0; i < SAMPLE_BLOCKS; i++) {
      const at = Math.floor((span * i) / (SAMPLE_BLOCKS - 1));
      const { bytesRead } = await fd.read(block, 0, Math.min(SAMPLE_BYTES, size), at);
      hash.update(block.subarray(0, bytesRead));
    }
  } finally {
    await fd.close();
  }
  return hash.digest('hex');
}

async function fileCheck(file: string, name: string): Promise<FileCheck> {
  const { size } = await stat(file);
  return { size, sha256: name === WEIGHTS_FILE ? await sha256Sampled(file, size) : await sha256Whole(file) };
}

function parseManifest(text: string): Manifest | undefined {
  try {
    const m = JSON.parse(text) as Partial<Manifest>;
    if (m.version !== 1 || typeof m.keyText !== 'string' || typeof m.name !== 'string') return undefined;
    if (typeof m.weightBytes !== 'number' || !Array.isArray(m.inputs) || !m.inputs.every((i) => (STAGE_INPUTS as readonly unknown[]).includes(i))) return undefined;
    if (m.files === null || typeof m.files !== 'object' || !(GRAPH_FILE in m.files)) return undefined;
    for (const f of Object.values(m.files)) if (!f || typeof f.size !== 'number' || typeof f.sha256 !== 'string') return undefined;
    return m as Manifest;
  } catch {
    return undefined;
  }
}

/** How a load used the cache. */
export interface StageCacheStats {
  hits: number;
  misses: number;
  /** entries written by this load */
  stored: number;
  /** entries found unusable (bad manifest, files that do not match it, refused by onnxruntime) and removed */
  dropped: number;
  /** entries removed to stay under the size cap */
  evicted: number;
  /** why the cache could not be used or written, one line each (the load went on without it) */
  problems: string[];
}

export const emptyStageCacheStats = (): StageCacheStats => ({ hits: 0, misses: 0, stored: 0, dropped: 0, evicted: 0, problems: [] });

/** One cache folder. Every method but `open` never throws. */
export class StageCache {
  readonly root: string;
  readonly maxBytes: number;
  readonly stats: StageCacheStats;

  private constructor(root: string, maxBytes: number, stats: StageCacheStats) {
    this.root = root;
    this.maxBytes = maxBytes;
    this.stats = stats;
  }

  /** The cache in `<cacheDir>/stages`, created if needed, counting into `stats`; undefined (and why, in stats.problems) when the folder cannot be made. */
  static async open(cacheDir: string, maxBytes = DEFAULT_STAGE_CACHE_BYTES, stats: StageCacheStats = emptyStageCacheStats()): Promise<StageCache | undefined> {
    const root = path.join(cacheDir, STAGE_CACHE_FOLDER);
    try {
      await mkdir(root, { recursive: true });
      return new StageCache(root, maxBytes, stats);
    } catch (error) {
      stats.problems.push(`stage cache off: cannot create ${root}: ${message(error)}`);
      return undefined;
    }
  }

  entryPath(key: string): string {
    return path.join(this.root, key);
  }

  /**
   * The entry for `key` when it is complete and matches its manifest (and marks it used); an entry
   * that is there but unusable is removed. Undefined: build the stage.
   */
  async lookup(key: string, keyText: string): Promise<CachedStage | undefined> {
    const dir = this.entryPath(key);
    let text: string;
    try {
      text = await readFile(path.join(dir, MANIFEST_FILE), 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') await this.drop(key, `unreadable manifest: ${message(error)}`);
      else if (await exists(dir)) await this.drop(key, 'no manifest');
      return undefined;
    }
    const m = parseManifest(text);
    if (!m) return void (await this.drop(key, 'malformed manifest'));
    if (m.keyText !== keyText) return void (await this.drop(key, 'manifest of another key'));
    let bytes = 0;
    for (const [name, want] of Object.entries(m.files)) {
      try {
        const got = await fileCheck(path.join(dir, name), name);
        if (got.size !== want.size || got.sha256 !== want.sha256) return void (await this.drop(key, `${name} does not match its manifest (${got.size} bytes, expected ${want.size})`));
        bytes += got.size;
      } catch (error) {
        return void (await this.drop(key, `${name}: ${message(error)}`));
      }
    }
    const now = new Date();
    await utimes(path.join(dir, MANIFEST_FILE), now, now).catch(() => undefined);
    return { key, name: m.name, weightBytes: m.weightBytes, inputs: m.inputs, graphPath: path.join(dir, GRAPH_FILE), bytes };
  }

  /** Removes an entry (onnxruntime refused it, or it failed its checks); counted in stats.dropped. */
  async drop(key: string, why: string): Promise<void> {
    this.stats.dropped++;
    this.stats.problems.push(`stage cache entry ${key.slice(0, 12)} removed: ${why}`);
    await this.remove(this.entryPath(key));
  }

  /** A fresh folder to write one entry into (then `publish` or `discard` it); undefined when none can be made. */
  async staging(): Promise<string | undefined> {
    const dir = path.join(this.root, `.tmp-${process.pid}-${randomBytes(6).toString('hex')}`);
    try {
      await mkdir(dir);
      return dir;
    } catch (error) {
      this.stats.problems.push(`stage cache not written: ${message(error)}`);
      return undefined;
    }
  }

  async discard(staged: string): Promise<void> {
    await rm(staged, { recursive: true, force: true }).catch(() => undefined);
  }

  /** Bytes of the files in a staged folder (0 when unreadable). */
  async stagedBytes(staged: string): Promise<number> {
    try {
      let n = 0;
      for (const f of await readdir(staged)) n += (await stat(path.join(staged, f))).size;
      return n;
    } catch {
      return 0;
    }
  }

  /**
   * Completes a staged entry (onnxruntime has written GRAPH_FILE and maybe WEIGHTS_FILE into it):
   * its manifest, then one rename to `key`. False (and the staged folder gone) when it was not
   * published: a write failed, or another process published the same key first.
   */
  async publish(staged: string, key: string, keyText: string, graph: Omit<StageGraph, 'model'>): Promise<boolean> {
    try {
      const files: Record<string, FileCheck> = {};
      for (const name of (await readdir(staged)).sort()) files[name] = await fileCheck(path.join(staged, name), name);
      if (!(GRAPH_FILE in files)) throw new Error(`onnxruntime wrote no ${GRAPH_FILE}`);
      const manifest: Manifest = { version: 1, keyText, name: graph.name, weightBytes: graph.weightBytes, inputs: graph.inputs, files };
      await writeFile(path.join(staged, MANIFEST_FILE), JSON.stringify(manifest));
      await rename(staged, this.entryPath(key));
      this.stats.stored++;
      return true;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      // another writer's complete entry is there: ours is the same, keep theirs
      if (code !== 'ENOTEMPTY' && code !== 'EEXIST') this.stats.problems.push(`stage cache entry ${key.slice(0, 12)} not written: ${message(error)}`);
      await this.discard(staged);
      return false;
    }
  }

  /**
   * Removes least recently used entries until the cache holds at most maxBytes, never one of `keep`
   * (the entries of the load in progress); also leftovers of crashed writers and unusable entries.
   */
  async enforceCap(keep: ReadonlySet<string>): Promise<void> {
    let names: string[];
    try {
      names = await readdir(this.root);
    } catch {
      return;
    }
    const entries: { key: string; bytes: number; used: number }[] = [];
    for (const name of names) {
      const dir = path.join(this.root, name);
      if (name.startsWith('.tmp-') || name.startsWith('.trash-')) {
        const s = await stat(dir).catch(() => undefined);
        if (s && (name.startsWith('.trash-') || Date.now() - s.mtimeMs > STALE_TMP_MS)) await this.remove(dir, false);
        continue;
      }
      if (!isKey(name)) continue; // not ours
      const sized = await entrySize(dir);
      if (sized === undefined) {
        if (!keep.has(name)) await this.drop(name, 'malformed manifest');
        continue;
      }
      entries.push({ key: name, ...sized });
    }
    let total = entries.reduce((n, e) => n + e.bytes, 0);
    entries.sort((a, b) => a.used - b.used);
    for (const e of entries) {
      if (total <= this.maxBytes) break;
      if (keep.has(e.key)) continue;
      await this.remove(this.entryPath(e.key));
      this.stats.evicted++;
      total -= e.bytes;
    }
  }

  /** Renames the folder away (readers never see it half deleted), then deletes it. */
  private async remove(dir: string, renameFirst = true): Promise<void> {
    let target = dir;
    if (renameFirst) {
      target = path.join(this.root, `.trash-${randomBytes(6).toString('hex')}`);
      try {
        await rename(dir, target);
      } catch {
        return; // gone already (another process removed it)
      }
    }
    await rm(target, { recursive: true, force: true }).catch(() => undefined);
  }
}

/** An entry's bytes on disk (its manifest's sizes) and last use; undefined when its manifest is unusable. */
async function entrySize(dir: string): Promise<{ bytes: number; used: number } | undefined> {
  try {
    const file = path.join(dir, MANIFEST_FILE);
    const [text, s] = await Promise.all([readFile(file, 'utf8'), stat(file)]);
    const m = parseManifest(text);
    if (!m) return undefined;
    return { bytes: Object.values(m.files).reduce((n, f) => n + f.size, text.length), used: s.mtimeMs };
  } catch {
    return undefined;
  }
}

async function exists(p: string): Promise<boolean> {
  return stat(p).then(
    () => true,
    () => false,
  );
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
