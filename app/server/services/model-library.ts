// The model library: models the user already has, found where the common tools keep them.
//   LM Studio     ~/.lmstudio/models/**, ~/.cache/lm-studio/models/**            *.gguf
//   Hugging Face  $HF_HUB_CACHE | $HF_HOME/hub | ~/.cache/huggingface/hub
//                 models--<org>--<name>/snapshots/<rev>/: config.json + *.safetensors is one
//                 safetensors model (bytes = the shards); *.gguf files are models of their own
//   Ollama        $OLLAMA_MODELS | ~/.ollama/models: manifests/<registry>/<ns>/<model>/<tag>
//                 (JSON) whose layer of mediaType application/vnd.ollama.image.model names the
//                 GGUF blob sha256:<hex> → blobs/sha256-<hex>
//   recent        settings.lastModelPath, when it still exists
// Every walk is bounded (depth, entries), skips what it cannot read, follows symlinks (Hugging
// Face snapshots are links into blobs/) but never enters the same real folder twice.
import { readdir, readFile, realpath, stat } from 'node:fs/promises';
import { homedir } from 'node:os';
import { basename, extname, join, relative, sep } from 'node:path';
import type { ModelEntry } from '../../common/app-api.ts';

export interface ScanOptions {
  /** The user's home folder (tests use a temp folder). */
  home?: string;
  /** HF_HOME, HF_HUB_CACHE, OLLAMA_MODELS are read from here. */
  env?: NodeJS.ProcessEnv;
  /** settings.lastModelPath ('' = none). */
  recentPath?: string;
  maxDepth?: number;
  /** Directory entries looked at per store. */
  maxEntries?: number;
}

const OLLAMA_MODEL_LAYER = 'application/vnd.ollama.image.model';
const MAX_MANIFEST_BYTES = 1024 * 1024;

interface Walk {
  entries: number;
  readonly maxEntries: number;
  readonly seen: Set<string>;
}

interface Found {
  path: string;
  /** Relative to the walk's root, with '/' separators. */
  rel: string;
  bytes: number;
}

export async function scanModels(options: ScanOptions = {}): Promise<ModelEntry[]> {
  const home = options.home ?? homedir();
  const env = options.env ?? process.env;
  const maxDepth = options.maxDepth ?? 6;
  const maxEntries = options.maxEntries ?? 20_000;
  const newWalk = (): Walk => ({ entries: 0, maxEntries, seen: new Set() });

  const entries: ModelEntry[] = [];
  if (options.recentPath) {
    const recent = await describePath(options.recentPath);
    if (recent) entries.push({ ...recent, source: 'recent' });
  }
  for (const root of [join(home, '.lmstudio', 'models'), join(home, '.cache', 'lm-studio', 'models')]) {
    for (const file of await findFiles(root, (name) => isGguf(name), maxDepth, newWalk())) entries.push({ path: file.path, name: file.rel, source: 'lmstudio', format: 'gguf', bytes: file.bytes });
  }
  entries.push(...(await scanHuggingFace(hfHubDir(env, home), maxDepth, newWalk)));
  entries.push(...(await scanOllama(env.OLLAMA_MODELS || join(home, '.ollama', 'models'), newWalk())));

  const seen = new Set<string>();
  return entries.filter((entry) => {
    if (seen.has(entry.path)) return false;
    seen.add(entry.path);
    return true;
  });
}

export function hfHubDir(env: NodeJS.ProcessEnv, home: string): string {
  if (env.HF_HUB_CACHE) return env.HF_HUB_CACHE;
  if (env.HF_HOME) return join(env.HF_HOME, 'hub');
  return join(home, '.cache', 'huggingface', 'hub');
}

/** A GGUF language model (projector files, mmproj-*.gguf, are not loadable on their own). */
function isGguf(name: string): boolean {
  return name.toLowerCase().endsWith('.gguf') && !name.toLowerCase().startsWith('mmproj');
}

async function scanHuggingFace(hub: string, maxDepth: number, newWalk: () => Walk): Promise<ModelEntry[]> {
  const found: ModelEntry[] = [];
  for (const repoDir of await listDir(hub)) {
    if (!repoDir.startsWith('models--')) continue;
    const repo = repoDir.slice('models--'.length).split('--').join('/');
    const snapshots = join(hub, repoDir, 'snapshots');
    const revisions = await listDir(snapshots);
    for (const revision of revisions) {
      const root = join(snapshots, revision);
      const label = revisions.length > 1 ? `${repo}@${revision.slice(0, 7)}` : repo;
      const walk = newWalk();
      // A folder with config.json and safetensors shards is one model (the snapshot root or a subfolder).
      const files = await findFiles(root, (name) => name === 'config.json' || name.endsWith('.safetensors') || isGguf(name), Math.min(maxDepth, 3), walk);
      const byFolder = new Map<string, Found[]>();
      for (const file of files) {
        const folder = file.rel.includes('/') ? file.rel.slice(0, file.rel.lastIndexOf('/')) : '';
        if (isGguf(file.rel)) {
          found.push({ path: file.path, name: `${label}/${file.rel}`, source: 'huggingface', format: 'gguf', bytes: file.bytes });
          continue;
        }
        byFolder.set(folder, [...(byFolder.get(folder) ?? []), file]);
      }
      for (const [folder, group] of byFolder) {
        const shards = group.filter((file) => file.rel.endsWith('.safetensors'));
        if (shards.length === 0 || !group.some((file) => basename(file.rel) === 'config.json')) continue;
        found.push({ path: folder ? join(root, ...folder.split('/')) : root, name: folder ? `${label}/${folder}` : label, source: 'huggingface', format: 'safetensors', bytes: shards.reduce((sum, file) => sum + file.bytes, 0) });
      }
    }
  }
  return found;
}

async function scanOllama(modelsDir: string, walk: Walk): Promise<ModelEntry[]> {
  const manifests = join(modelsDir, 'manifests');
  // manifests/<registry>/<namespace>/<model>/<tag>: exactly four levels.
  const files = await findFiles(manifests, () => true, 4, walk);
  const found: ModelEntry[] = [];
  for (const file of files) {
    const parts = file.rel.split('/');
    if (parts.length !== 4 || file.bytes > MAX_MANIFEST_BYTES) continue;
    const [registry, namespace, model, tag] = parts as [string, string, string, string];
    let manifest: unknown;
    try {
      manifest = JSON.parse(await readFile(file.path, 'utf8'));
    } catch {
      continue;
    }
    const layers = (manifest as { layers?: unknown } | null)?.layers;
    if (!Array.isArray(layers)) continue;
    const layer = layers.find((l) => (l as { mediaType?: unknown } | null)?.mediaType === OLLAMA_MODEL_LAYER) as { digest?: unknown } | undefined;
    const digest = typeof layer?.digest === 'string' ? /^sha256:([0-9a-f]{64})$/.exec(layer.digest) : null;
    if (!digest) continue;
    const blob = join(modelsDir, 'blobs', `sha256-${digest[1]}`);
    const info = await stat(blob).catch(() => undefined);
    if (!info?.isFile()) continue;
    const short = registry === 'registry.ollama.ai' ? (namespace === 'library' ? model : `${namespace}/${model}`) : `${registry}/${namespace}/${model}`;
    found.push({ path: blob, name: `${short}:${tag}`, source: 'ollama', format: 'gguf', bytes: info.size });
  }
  return found;
}

/** What a user-given path is: a .gguf file, or a folder with config.json + safetensors. */
export async function describePath(path: string): Promise<Omit<ModelEntry, 'source'> | undefined> {
  const info = await stat(path).catch(() => undefined);
  if (!info) return undefined;
  if (info.isFile() && extname(path).toLowerCase() === '.gguf') return { path, name: basename(path), format: 'gguf', bytes: info.size };
  if (!info.isDirectory()) return undefined;
  const names = await listDir(path);
  if (!names.includes('config.json')) return undefined;
  let bytes = 0;
  let shards = 0;
  for (const name of names) {
    if (!name.endsWith('.safetensors')) continue;
    const shard = await stat(join(path, name)).catch(() => undefined);
    if (shard?.isFile()) {
      bytes += shard.size;
      shards += 1;
    }
  }
  return shards > 0 ? { path, name: basename(path), format: 'safetensors', bytes } : undefined;
}

async function listDir(dir: string): Promise<string[]> {
  try {
    return (await readdir(dir)).sort();
  } catch {
    return [];
  }
}

/** Files under `root` whose name passes `want`, depth-first, bounded by depth and walk.maxEntries. */
async function findFiles(root: string, want: (name: string) => boolean, maxDepth: number, walk: Walk): Promise<Found[]> {
  const found: Found[] = [];
  const visit = async (dir: string, depth: number): Promise<void> => {
    let real: string;
    try {
      real = await realpath(dir);
    } catch {
      return;
    }
    if (walk.seen.has(real)) return; // a symlink loop, or a folder reached twice
    walk.seen.add(real);
    let dirents;
    try {
      dirents = await readdir(dir, { withFileTypes: true });
    } catch {
      return; // unreadable: skip
    }
    dirents.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const dirent of dirents) {
      if (walk.entries >= walk.maxEntries) return;
      walk.entries += 1;
      if (dirent.name.startsWith('.')) continue;
      const path = join(dir, dirent.name);
      let isDir = dirent.isDirectory();
      let isFile = dirent.isFile();
      let size = 0;
      if (dirent.isSymbolicLink() || isFile) {
        const info = await stat(path).catch(() => undefined); // follows the link; a dangling one is skipped
        if (!info) continue;
        isDir = info.isDirectory();
        isFile = info.isFile();
        size = info.size;
      }
      if (isDir) {
        if (depth < maxDepth) await visit(path, depth + 1);
      } else if (isFile && want(dirent.name)) {
        found.push({ path, rel: relative(root, path).split(sep).join('/'), bytes: size });
      }
    }
  };
  await visit(root, 1);
  return found;
}
