// Where the bundled pieces sit. The main bundle is out/main/index.cjs (scripts/bundle-main.cjs);
// the preload, the engine host and the renderer are found relative to it, in a checkout and
// inside the packaged app.asar alike.
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export interface AppLayout {
  root: string;
  preload: string;
  engineHost: string;
  renderer: string;
}

export const ENGINE_SERVICE_NAME = 'Longhand engine';

/** `mainDir` is the folder of the running main bundle (out/main). */
export function appLayout(mainDir: string): AppLayout {
  const root = resolve(mainDir, '..', '..');
  return {
    root,
    preload: join(root, 'out', 'preload', 'index.cjs'),
    engineHost: join(root, 'out', 'engine', 'host.mjs'),
    renderer: join(root, 'renderer', 'dist'),
  };
}

/** The running bundle's folder: __dirname in the CommonJS bundle, import.meta.url under tsx/vitest. */
export function currentMainDir(): string {
  if (typeof __dirname === 'string' && __dirname !== '') return __dirname;
  return join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'out', 'main');
}
