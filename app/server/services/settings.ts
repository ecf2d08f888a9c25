// Settings: <dataDir>/settings.json, replaced atomically. Reading never fails on the file's
// content: a file that is not JSON or does not match SettingsSchema is moved aside to
// settings.json.bad-<ms since epoch>, the defaults are used, and the answer carries a warning
// that says so (the window shows it). A missing file is simply the defaults.
import { readFile, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { SettingsSchema, type Settings } from '../../common/app-api.ts';
import { writeFileAtomic } from './atomic-write.ts';

export const SETTINGS_FILE = 'settings.json';

export function defaultSettings(): Settings {
  return SettingsSchema.parse({});
}

export class SettingsStore {
  readonly path: string;

  constructor(
    dataDir: string,
    private readonly now: () => number = Date.now,
  ) {
    this.path = join(dataDir, SETTINGS_FILE);
  }

  async get(): Promise<{ settings: Settings; warning: string | null }> {
    let text: string;
    try {
      text = await readFile(this.path, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return { settings: defaultSettings(), warning: null };
      throw error;
    }
    let why: string;
    try {
      const parsed = SettingsSchema.safeParse(JSON.parse(text));
      if (parsed.success) return { settings: parsed.data, warning: null };
      const issue = parsed.error.issues[0];
      why = `${issue && issue.path.length > 0 ? issue.path.join('.') : '(file)'}: ${issue?.message ?? 'does not match the settings schema'}`;
    } catch (error) {
      why = `not valid JSON (${(error as Error).message})`;
    }
    const backup = `${this.path}.bad-${this.now()}`;
    let kept: string;
    try {
      await rename(this.path, backup);
      kept = `the old file is kept as ${backup}`;
    } catch (error) {
      kept = `it could not be moved aside (${(error as Error).message})`;
    }
    return { settings: defaultSettings(), warning: `Your settings file could not be used (${why}); the defaults are in effect and ${kept}.` };
  }

  async save(settings: Settings): Promise<{ settings: Settings }> {
    const valid = SettingsSchema.parse(settings);
    await writeFileAtomic(this.path, `${JSON.stringify(valid, null, 2)}\n`);
    return { settings: valid };
  }

  /** The recent model path, without a warning and without moving anything aside. */
  async lastModelPath(): Promise<string> {
    try {
      const parsed = SettingsSchema.safeParse(JSON.parse(await readFile(this.path, 'utf8')));
      return parsed.success ? parsed.data.lastModelPath : '';
    } catch {
      return '';
    }
  }
}
