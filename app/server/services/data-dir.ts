// Where browser mode and the CLI keep documents, settings and downloaded models when no
// --data-dir is given: $XDG_DATA_HOME/longhand, else ~/.local/share/longhand (Linux and other
// Unixes); ~/Library/Application Support/longhand (macOS); %APPDATA%\longhand (Windows).
// The desktop app uses Electron's userData folder instead.
import { homedir } from 'node:os';
import { isAbsolute, join } from 'node:path';
import { SNAPSHOT_DIR_ENV, SNAPSHOT_FOLDER } from '../../common/protocol.ts';

export function defaultDataDir(env: NodeJS.ProcessEnv = process.env, home: string = homedir(), platform: NodeJS.Platform = process.platform): string {
  const xdg = env.XDG_DATA_HOME;
  if (xdg && isAbsolute(xdg)) return join(xdg, 'longhand');
  if (platform === 'darwin') return join(home, 'Library', 'Application Support', 'longhand');
  if (platform === 'win32' && env.APPDATA) return join(env.APPDATA, 'longhand');
  return join(home, '.local', 'share', 'longhand');
}

/** Where the engine host keeps document snapshots for this data folder: beside documents/. */
export function snapshotDir(dataDir: string): string {
  return join(dataDir, SNAPSHOT_FOLDER);
}

/** The environment of an engine host serving this data folder: `env` plus its snapshot folder. */
export function engineEnv(dataDir: string, env: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  return { ...env, [SNAPSHOT_DIR_ENV]: snapshotDir(dataDir) };
}
