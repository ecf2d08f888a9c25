// The window's size, position and maximised state round-trip through userData, atomically.
import { mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { captureWindowState, DEFAULT_WINDOW_STATE, loadWindowState, saveWindowState, windowStatePath } from '../../app/main/window-state.ts';

const userData = () => mkdtempSync(join(tmpdir(), 'longhand-window-state-'));
const SCREEN = [{ x: 0, y: 0, width: 1920, height: 1080 }];
const quiet = () => undefined;

describe('window state', () => {
  it('round-trips size, position and maximised', () => {
    const dir = userData();
    saveWindowState(dir, { width: 1000, height: 700, x: 50, y: 60, maximized: true });
    expect(loadWindowState(dir, SCREEN)).toEqual({ width: 1000, height: 700, x: 50, y: 60, maximized: true });
    expect(readdirSync(dir)).toEqual(['window-state.json']); // no temp file left behind
  });

  it('uses the defaults when there is no file', () => {
    expect(loadWindowState(userData(), SCREEN)).toEqual(DEFAULT_WINDOW_STATE);
  });

  it.each([
    ['not JSON', '{"width": 1000, "hei'],
    ['empty', ''],
    ['an array', '[1,2,3]'],
    ['sizes of the wrong type', '{"width":"big","height":700}'],
    ['absurd sizes', '{"width":1e12,"height":-5}'],
    ['null', 'null'],
  ])('survives a corrupt file (%s)', (_why, text) => {
    const dir = userData();
    writeFileSync(windowStatePath(dir), text);
    expect(loadWindowState(dir, SCREEN, quiet)).toEqual(DEFAULT_WINDOW_STATE);
    // and can save over it
    saveWindowState(dir, { width: 900, height: 600, maximized: false });
    expect(loadWindowState(dir, SCREEN)).toEqual({ width: 900, height: 600, maximized: false });
  });

  it('drops a position that is on no display (an unplugged monitor), keeps the size', () => {
    const dir = userData();
    saveWindowState(dir, { width: 1000, height: 700, x: 5000, y: 3000, maximized: false });
    expect(loadWindowState(dir, SCREEN)).toEqual({ width: 1000, height: 700, maximized: false });
  });

  it('captures the normal bounds of a window', () => {
    const window = { getNormalBounds: () => ({ x: 10.4, y: 20.6, width: 300, height: 999 }), isMaximized: () => false };
    expect(captureWindowState(window)).toEqual({ x: 10, y: 21, width: 640, height: 999, maximized: false });
  });
});
