// The app requests (app/common/app-api.ts) answered by one set of services over one data
// folder. Browser mode (app/server/app-route.ts) and the desktop app's main process
// (app/main/index.ts) both call answer() with an already-parsed AppRequest, so the two carriers
// cannot drift. This module must not import app/engine (main may not): models.inspect is a
// function passed in — the server passes inspect-model.ts; main passes none, and the request
// then fails with BAD_ARGUMENT (see INSPECT_UNAVAILABLE).
import type { AppRequest, AppResponses } from '../../common/app-api.ts';
import { LonghandError } from '../../common/errors.ts';
import { DocumentStore } from './documents.ts';
import { DownloadManager, type DownloadOptions } from './downloads.ts';
import { scanModels } from './model-library.ts';
import { SettingsStore } from './settings.ts';

export type InspectModel = (path: string, contextTokens: number | undefined) => Promise<Record<string, unknown>>;
/** A header-only look at a model (app/engine/model/probe.ts): its architecture, and the refusal a load would give. */
export type ProbeModel = (path: string) => Promise<{ architecture: string | null; refusal: string | null }>;

export interface AppServicesOptions {
  dataDir: string;
  /** The model library's home folder (tests point it at a fake one). */
  home?: string;
  env?: NodeJS.ProcessEnv;
  inspect?: InspectModel;
  /** Marks each scanned model with its architecture and refusal (passed in like `inspect`: it reads model headers). */
  probe?: ProbeModel;
  downloads?: DownloadOptions;
}

export const INSPECT_UNAVAILABLE = 'inspect runs in browser mode or the CLI in this version (longhand inspect <path>)';

export interface AppServices {
  readonly documents: DocumentStore;
  readonly settings: SettingsStore;
  readonly downloads: DownloadManager;
  answer<K extends AppRequest['kind']>(request: Extract<AppRequest, { kind: K }>): Promise<AppResponses[K]>;
  /** Pauses running downloads (their .part files stay). */
  close(): Promise<void>;
}

export function createAppServices(options: AppServicesOptions): AppServices {
  const documents = new DocumentStore(options.dataDir);
  const settings = new SettingsStore(options.dataDir);
  const downloads = new DownloadManager(options.dataDir, options.downloads);

  async function dispatch(request: AppRequest): Promise<AppResponses[AppRequest['kind']]> {
    switch (request.kind) {
      case 'documents.list':
        return documents.list();
      case 'documents.get':
        return documents.get(request.id);
      case 'documents.save':
        return documents.save(request.document);
      case 'documents.delete':
        return documents.delete(request.id);
      case 'settings.get':
        return settings.get();
      case 'settings.save':
        return settings.save(request.settings);
      case 'models.scan': {
        const entries = await scanModels({ home: options.home, env: options.env, recentPath: await settings.lastModelPath() });
        const probe = options.probe;
        if (!probe) return entries;
        return Promise.all(
          entries.map(async (entry) => {
            const { architecture, refusal } = await probe(entry.path);
            return { ...entry, ...(architecture !== null ? { architecture } : {}), ...(refusal !== null ? { refusal } : {}) };
          }),
        );
      }
      case 'models.inspect':
        if (!options.inspect) throw new LonghandError('BAD_ARGUMENT', INSPECT_UNAVAILABLE, { path: request.path });
        return options.inspect(request.path, request.contextTokens);
      case 'downloads.start':
        return downloads.start(request.url, request.sha256);
      case 'downloads.pause':
        return downloads.pause(request.id);
      case 'downloads.resume':
        return downloads.resume(request.id);
      case 'downloads.list':
        return downloads.list();
      default: {
        const never: never = request;
        throw new LonghandError('PROTOCOL_BAD_MESSAGE', `unknown app request ${(never as { kind?: string }).kind}`);
      }
    }
  }

  return {
    documents,
    settings,
    downloads,
    answer: (request) => dispatch(request) as Promise<never>,
    close: () => downloads.close(),
  };
}
