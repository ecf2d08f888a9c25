// Picks the carrier of the window API: Electron's preload when it is there, else browser mode.
// Tests (and the future e2e harness) install their own with setBridge().
import type { LonghandWindowApi } from '../../../app/common/window-api.ts';
import { preloadBridge } from './preload-bridge.ts';
import { webBridge } from './web-bridge.ts';

export type { LonghandWindowApi };
export { AppRequestError } from './web-bridge.ts';

export function pickBridge(): LonghandWindowApi {
  return preloadBridge() ?? webBridge();
}
