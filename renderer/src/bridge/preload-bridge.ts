// Electron: the preload exposes the window API as `window.longhand` (contextBridge). Nothing to
// adapt — the preload already speaks LonghandWindowApi.
import type { LonghandWindowApi } from '../../../app/common/window-api.ts';

declare global {
  interface Window {
    longhand?: LonghandWindowApi;
  }
}

export function preloadBridge(): LonghandWindowApi | undefined {
  return typeof window !== 'undefined' ? window.longhand : undefined;
}
