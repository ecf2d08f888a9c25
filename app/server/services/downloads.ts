// Model downloads into <dataDir>/models/<file>. A download writes <file>.part and renames it to
// <file> when complete (and verified, when a sha256 was given). Pause aborts the request and
// keeps the .part; resume asks for the rest with `Range: bytes=<part size>-` — a 206 appends, a
// 200 (the server ignored Range) starts the file over cleanly. Redirects are followed (Hugging
// Face's resolve/ URLs redirect to a CDN). States are kept in <dataDir>/downloads.json so that
// after a restart an unfinished download shows as paused and can be resumed.
//
// Status per download: running → done | paused | failed; paused|failed → running (resume).
// A sha256 mismatch is 'failed' with the bad file removed; a network error is 'failed' with the
// .part kept (resume continues it).
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, open, readFile, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { DownloadStateSchema, type DownloadState } from '../../common/app-api.ts';
import { LonghandError } from '../../common/errors.ts';
import { writeFileAtomic } from './atomic-write.ts';

export interface DownloadOptions {
  /** Called after each received chunk and on every status change (tests, logs). */
  onProgress?: (state: DownloadState) => void;
  fetch?: typeof fetch;
}

interface Job {
  state: DownloadState;
  controller?: AbortController;
  /** Settles when the current run (if any) has stopped writing. */
  run?: Promise<void>;
}

/** The file name a URL's last path segment gives, made safe (no separators, no leading dot). */
export function fileNameFromUrl(url: string): string {
  const segments = new URL(url).pathname.split('/').filter(Boolean);
  let name = '';
  try {
    name = decodeURIComponent(segments.at(-1) ?? '');
  } catch {
    name = segments.at(-1) ?? '';
  }
  name = name.replace(/[^A-Za-z0-9._+-]/g, '_').replace(/^[.]+/, '').slice(0, 200);
  if (name === '' || name.endsWith('.part')) throw new LonghandError('BAD_ARGUMENT', `the URL does not end in a file name: ${url}`, { url });
  return name;
}

export function downloadId(url: string): string {
  return createHash('sha256').update(url).digest('hex').slice(0, 16);
}

export class DownloadManager {
  readonly modelsDir: string;
  private readonly statePath: string;
  private readonly jobs = new Map<string, Job>();
  private loaded: Promise<void> | undefined;
  private readonly doFetch: typeof fetch;

  constructor(
    dataDir: string,
    private readonly options: DownloadOptions = {},
  ) {
    this.modelsDir = join(dataDir, 'models');
    this.statePath = join(dataDir, 'downloads.json');
    this.doFetch = options.fetch ?? ((input, init) => fetch(input, init));
  }

  async list(): Promise<DownloadState[]> {
    await this.load();
    return [...this.jobs.values()].map((job) => ({ ...job.state }));
  }

  async start(url: string, sha256?: string): Promise<DownloadState> {
    await this.load();
    const id = downloadId(url);
    const existing = this.jobs.get(id);
    if (existing) {
      if (existing.state.status === 'running' || existing.state.status === 'done') return { ...existing.state };
      if (sha256) existing.state.sha256 = sha256;
      return this.resume(id);
    }
    const path = join(this.modelsDir, fileNameFromUrl(url));
    for (const job of this.jobs.values()) {
      if (job.state.path === path) throw new LonghandError('BAD_ARGUMENT', `another download already writes ${path}`, { path });
    }
    if (await exists(path)) throw new LonghandError('BAD_ARGUMENT', `${path} already exists; remove it first to download it again`, { path });
    const job: Job = { state: { id, url, path, status: 'running', receivedBytes: 0, totalBytes: null, sha256: sha256 ?? null, error: null } };
    this.jobs.set(id, job);
    await this.launch(job);
    return { ...job.state };
  }

  /** Stops a running download and keeps its .part; answers once nothing more is written. */
  async pause(id: string): Promise<DownloadState> {
    const job = await this.job(id);
    if (job.state.status === 'running') {
      job.state.status = 'paused';
      job.controller?.abort();
      await job.run;
      job.state.receivedBytes = await sizeOf(`${job.state.path}.part`);
      this.changed(job);
      await this.persist();
    }
    return { ...job.state };
  }

  async resume(id: string): Promise<DownloadState> {
    const job = await this.job(id);
    if (job.state.status === 'paused' || job.state.status === 'failed') {
      await job.run; // a paused run has already stopped; this is only for safety
      job.state.status = 'running';
      job.state.error = null;
      job.state.receivedBytes = await sizeOf(`${job.state.path}.part`);
      await this.launch(job);
    }
    return { ...job.state };
  }

  /** Pauses everything (the server is closing); the .part files stay for the next run. */
  async close(): Promise<void> {
    const running = [...this.jobs.values()].filter((job) => job.state.status === 'running');
    await Promise.all(running.map((job) => this.pause(job.state.id)));
  }

  // ── internals ──────────────────────────────────────────────────────────────────────────────

  private async job(id: string): Promise<Job> {
    await this.load();
    const job = this.jobs.get(id);
    if (!job) throw new LonghandError('BAD_ARGUMENT', `there is no download with id '${id.slice(0, 80)}'`, { id: id.slice(0, 80), notFound: true });
    return job;
  }

  private async launch(job: Job): Promise<void> {
    await mkdir(this.modelsDir, { recursive: true });
    const controller = new AbortController();
    job.controller = controller;
    this.changed(job);
    await this.persist();
    job.run = this.transfer(job, controller.signal).then(
      async () => {
        if (job.controller === controller) job.controller = undefined;
        await this.persist();
      },
      async (error: unknown) => {
        if (job.controller === controller) job.controller = undefined;
        if (!controller.signal.aborted) {
          job.state.status = 'failed';
          job.state.error = error instanceof Error ? error.message : String(error);
          job.state.receivedBytes = await sizeOf(`${job.state.path}.part`);
          this.changed(job);
        }
        await this.persist();
      },
    );
  }

  /** One request-and-write run; throws on failure (an abort counts as a quiet stop). */
  private async transfer(job: Job, signal: AbortSignal): Promise<void> {
    const { state } = job;
    const part = `${state.path}.part`;
    const have = await sizeOf(part);
    const headers: Record<string, string> = { 'Accept-Encoding': 'identity', 'User-Agent': 'longhand' };
    if (have > 0) headers.Range = `bytes=${have}-`;
    const response = await this.doFetch(state.url, { headers, signal, redirect: 'follow' });

    let append = false;
    if (response.status === 206 && have > 0) {
      const range = /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec(response.headers.get('content-range') ?? '');
      if (!range || Number(range[1]) !== have) {
        await response.body?.cancel();
        throw new Error(`the server answered a range that does not continue the partial file (${response.headers.get('content-range') ?? 'no Content-Range'})`);
      }
      append = true;
      state.totalBytes = range[3] === '*' ? null : Number(range[3]);
    } else if (response.status === 416 && have > 0) {
      // Nothing past what we have: complete if the server's size agrees, otherwise start over.
      const total = /^bytes \*\/(\d+)$/.exec(response.headers.get('content-range') ?? '');
      await response.body?.cancel();
      if (total && Number(total[1]) === have) {
        state.totalBytes = have;
        state.receivedBytes = have;
        return this.finish(job);
      }
      await rm(part, { force: true });
      return this.transfer(job, signal);
    } else if (response.status === 200) {
      const length = response.headers.get('content-length');
      state.totalBytes = length !== null && /^\d+$/.test(length) ? Number(length) : null;
    } else {
      await response.body?.cancel();
      throw new Error(`the server answered HTTP ${response.status}${response.statusText ? ` ${response.statusText}` : ''} for ${state.url}`);
    }

    state.receivedBytes = append ? have : 0;
    this.changed(job);
    const file = await open(part, append ? 'a' : 'w');
    try {
      if (response.body) {
        for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
          await file.write(chunk);
          state.receivedBytes += chunk.byteLength;
          this.changed(job);
        }
      }
      await file.sync();
    } finally {
      await file.close();
    }
    if (signal.aborted) return;
    if (state.totalBytes !== null && state.receivedBytes !== state.totalBytes) throw new Error(`the connection ended after ${state.receivedBytes} of ${state.totalBytes} bytes; resume to continue`);
    return this.finish(job);
  }

  /** Verifies (when asked) and moves the .part into place. */
  private async finish(job: Job): Promise<void> {
    const { state } = job;
    const part = `${state.path}.part`;
    if (state.sha256) {
      const actual = await sha256File(part);
      if (actual !== state.sha256) {
        await rm(part, { force: true });
        state.status = 'failed';
        state.receivedBytes = 0;
        state.error = `sha256 mismatch: expected ${state.sha256}, got ${actual}; the downloaded file was removed`;
        this.changed(job);
        return;
      }
    }
    await rename(part, state.path);
    state.status = 'done';
    state.totalBytes ??= state.receivedBytes;
    this.changed(job);
  }

  private changed(job: Job): void {
    this.options.onProgress?.({ ...job.state });
  }

  private load(): Promise<void> {
    this.loaded ??= (async () => {
      let saved: unknown;
      try {
        saved = JSON.parse(await readFile(this.statePath, 'utf8'));
      } catch {
        return; // none yet, or unreadable: start with an empty list
      }
      if (!Array.isArray(saved)) return;
      for (const item of saved) {
        const parsed = DownloadStateSchema.safeParse(item);
        if (!parsed.success) continue;
        const state = parsed.data;
        if (state.status === 'running') state.status = 'paused'; // the last run ended without us
        if (state.status !== 'done') state.receivedBytes = await sizeOf(`${state.path}.part`);
        this.jobs.set(state.id, { state });
      }
    })();
    return this.loaded;
  }

  private persisting: Promise<void> = Promise.resolve();

  /** Writes the states (in order: one write at a time); a failure is not fatal to the download. */
  private persist(): Promise<void> {
    const states = [...this.jobs.values()].map((job) => job.state);
    this.persisting = this.persisting.then(() => writeFileAtomic(this.statePath, JSON.stringify(states)).catch(() => {}));
    return this.persisting;
  }
}

async function sizeOf(path: string): Promise<number> {
  try {
    return (await stat(path)).size;
  } catch {
    return 0;
  }
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

export async function sha256File(path: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(path)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}
