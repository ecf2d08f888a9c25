// The window's services: the bridge (window API) and the one engine client over it. Installed
// once at start-up (main.tsx) — or by a test with a fake window API — and read by store actions.
import type { LonghandWindowApi } from '../../app/common/window-api.ts';
import { EngineClient, type EngineClientOptions } from './engine/client.ts';
import { useEngineStore } from './engine/store.ts';

export interface Services {
  api: LonghandWindowApi;
  engine: EngineClient;
}

let current: (Services & { dispose(): void }) | undefined;

export function installServices(api: LonghandWindowApi, options: EngineClientOptions = {}): Services {
  current?.dispose();
  const engine = new EngineClient(api, options);
  const offStatus = api.onEngineStatus((status) => useEngineStore.getState().setStatus(status));
  const offModel = engine.onModelAnnounced((model) => useEngineStore.getState().setModel(model));
  current = {
    api,
    engine,
    dispose: () => {
      offStatus();
      offModel();
      engine.dispose();
    },
  };
  return current;
}

export function services(): Services {
  if (!current) throw new Error('services are not installed (main.tsx installs them before rendering)');
  return current;
}

export function uninstallServices(): void {
  current?.dispose();
  current = undefined;
}
