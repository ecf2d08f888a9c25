// The window's size, position and maximised state, remembered in the app's userData folder.
// Written atomically (temp file + rename) so a crash mid-write never leaves half a file; a
// missing, corrupt or off-screen state falls back to defaults.
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

export interface WindowState {
  width: number;
  height: number;
  x?: number;
  y?: number;
  maximized: boolean;
}

export interface Rect {
  x: number;
  y: number;
  width: number;
  height: number;
}

export const DEFAULT_WINDOW_STATE: Readonly<WindowState> = Object.freeze({ width: 1200, height: 800, maximized: false });
export const MIN_WINDOW_SIZE = Object.freeze({ width: 640, height: 480 });
const MAX_EDGE = 100_000;

export function windowStatePath(userData: string): string {
  return join(userData, 'window-state.json');
}

const isInt = (value: unknown, min: number, max: number): value is number => typeof value === 'number' && Number.isInteger(value) && value >= min && value <= max;

/** Validates what was read; anything odd gives the defaults (or drops only a bad position). */
export function parseWindowState(value: unknown): WindowState {
  if (typeof value !== 'object' || value === null) return { ...DEFAULT_WINDOW_STATE };
  const record = value as Record<string, unknown>;
  if (!isInt(record.width, MIN_WINDOW_SIZE.width, MAX_EDGE) || !isInt(record.height, MIN_WINDOW_SIZE.height, MAX_EDGE)) return { ...DEFAULT_WINDOW_STATE };
  const state: WindowState = { width: record.width, height: record.height, maximized: record.maximized === true };
  if (isInt(record.x, -MAX_EDGE, MAX_EDGE) && isInt(record.y, -MAX_EDGE, MAX_EDGE)) {
    state.x = record.x;
    state.y = record.y;
  }
  return state;
}

/**
 * Reads the saved state. `workAreas` (the displays' work areas) drops a position whose window
 * would not show at least 100×50 px on any display (a monitor that was unplugged).
 */
export function loadWindowState(userData: string, workAreas: readonly Rect[] = [], log: (message: string) => void = console.warn): WindowState {
  let raw: string;
  try {
    raw = readFileSync(windowStatePath(userData), 'utf8');
  } catch {
    return { ...DEFAULT_WINDOW_STATE };
  }
  let state: WindowState;
  try {
    state = parseWindowState(JSON.parse(raw));
  } catch {
    log('[window-state] the saved window state is corrupt; using defaults');
    return { ...DEFAULT_WINDOW_STATE };
  }
  if (state.x !== undefined && state.y !== undefined && workAreas.length > 0) {
    const rect = { x: state.x, y: state.y, width: state.width, height: state.height };
    if (!workAreas.some((area) => overlap(rect, area) >= 100 * 50)) {
      delete state.x;
      delete state.y;
    }
  }
  return state;
}

export function saveWindowState(userData: string, state: WindowState): void {
  const path = windowStatePath(userData);
  mkdirSync(dirname(path), { recursive: true });
  const temp = `${path}.${process.pid}.tmp`;
  writeFileSync(temp, `${JSON.stringify(parseWindowState(state))}\n`, { mode: 0o600 });
  renameSync(temp, path);
}

/** What to remember of a window: its normal bounds (not the maximised ones) and whether it is maximised. */
export function captureWindowState(window: { getNormalBounds(): Rect; isMaximized(): boolean }): WindowState {
  const bounds = window.getNormalBounds();
  return {
    width: Math.max(MIN_WINDOW_SIZE.width, Math.round(bounds.width)),
    height: Math.max(MIN_WINDOW_SIZE.height, Math.round(bounds.height)),
    x: Math.round(bounds.x),
    y: Math.round(bounds.y),
    maximized: window.isMaximized(),
  };
}

function overlap(a: Rect, b: Rect): number {
  const width = Math.min(a.x + a.width, b.x + b.width) - Math.max(a.x, b.x);
  const height = Math.min(a.y + a.height, b.y + b.height) - Math.max(a.y, b.y);
  return width > 0 && height > 0 ? width * height : 0;
}
