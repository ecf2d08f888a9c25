// electron-builder.yml: the fuses, the targets, asarUnpack globs that match real native files,
// and `files` that hold everything the bundles load at run time. The file is written in the JSON
// subset of YAML (plus whole-line comments), which is all this small reader accepts.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, relative, sep } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { appLayout } from '../../app/main/paths.ts';
import { PROJECT_ROOT } from '../support/models.ts';

/** Reads the JSON subset of YAML: whole-line `#` comments, then one JSON value. */
export function readJsonYaml(text: string): unknown {
  const body = text
    .split('\n')
    .filter((line) => !line.trimStart().startsWith('#'))
    .join('\n');
  return JSON.parse(body);
}

/** A glob as electron-builder writes them (`**`, `*`, `?`, `{a,b}`) as a regular expression over / paths. */
export function globToRegExp(glob: string): RegExp {
  let source = '';
  for (let i = 0; i < glob.length; i++) {
    const char = glob[i]!;
    if (char === '*' && glob[i + 1] === '*') {
      source += '.*';
      i++;
      if (glob[i + 1] === '/') i++;
    } else if (char === '*') source += '[^/]*';
    else if (char === '?') source += '[^/]';
    else if (char === '{') source += '(?:';
    else if (char === '}') source += ')';
    else if (char === ',' && source.includes('(?:')) source += '|';
    else source += char.replace(/[.+^$()|[\]\\]/g, '\\$&');
  }
  return new RegExp(`^${source}$`);
}

/** Files under the glob's fixed prefix that match it (paths relative to the root, with /). */
function matchingFiles(root: string, glob: string): string[] {
  const fixed = glob.split('/').filter((_part, index, parts) => !parts.slice(0, index + 1).some((p) => /[*?{]/.test(p)));
  const start = join(root, ...fixed);
  const pattern = globToRegExp(glob);
  const found: string[] = [];
  const walk = (path: string) => {
    let stats;
    try {
      stats = statSync(path);
    } catch {
      return;
    }
    if (stats.isDirectory()) for (const name of readdirSync(path)) walk(join(path, name));
    else {
      const rel = relative(root, path).split(sep).join('/');
      if (pattern.test(rel)) found.push(rel);
    }
  };
  walk(start);
  return found;
}

interface BuilderConfig {
  appId: string;
  extraMetadata: { main: string };
  files: string[];
  asarUnpack: string[];
  electronFuses: Record<string, boolean>;
  linux: { target: string[] };
  win: { target: string[] };
  mac: { target: string[] };
}

let config: BuilderConfig;
let bundles: { main: string; preload: string; engineHost: string };
const rel = (path: string) => relative(PROJECT_ROOT, path).split(sep).join('/');
const inFiles = (path: string) => config.files.filter((glob) => !glob.startsWith('!')).some((glob) => globToRegExp(glob).test(path));

beforeAll(() => {
  config = readJsonYaml(readFileSync(join(PROJECT_ROOT, 'electron-builder.yml'), 'utf8')) as BuilderConfig;
  const require = createRequire(import.meta.url);
  const { bundleAll } = require('../../scripts/bundle-main.cjs') as { bundleAll: (root: string) => typeof bundles };
  bundles = bundleAll(PROJECT_ROOT);
});

describe('electron-builder.yml', () => {
  it('reads as YAML written in its JSON subset', () => {
    expect(readJsonYaml('# c\n{ "a": [1] }\n')).toEqual({ a: [1] });
    expect(config.appId).toBe('app.longhand.desktop');
  });

  it('flips the fuses', () => {
    expect(config.electronFuses).toMatchObject({
      runAsNode: false,
      enableNodeOptionsEnvironmentVariable: false,
      enableNodeCliInspectArguments: false,
      enableEmbeddedAsarIntegrityValidation: true,
      onlyLoadAppFromAsar: true,
    });
  });

  it('builds AppImage + deb, NSIS and dmg', () => {
    expect(config.linux.target).toEqual(['AppImage', 'deb']);
    expect(config.win.target).toEqual(['nsis']);
    expect(config.mac.target).toEqual(['dmg']);
  });

  it('unpacks the native addon and onnxruntime binaries, and every asarUnpack glob matches a real file', () => {
    expect(config.asarUnpack).toEqual(expect.arrayContaining(['native/build/Release/*.node', 'node_modules/onnxruntime-node/bin/**']));
    for (const glob of config.asarUnpack) {
      const found = matchingFiles(PROJECT_ROOT, glob);
      expect(found.length, `${glob} matches nothing (is the addon built?)`).toBeGreaterThan(0);
      for (const file of found) expect(inFiles(file), `${file} is unpacked but not packaged`).toBe(true);
    }
    expect(matchingFiles(PROJECT_ROOT, 'native/build/Release/*.node')).toContain('native/build/Release/longhand.node');
  });

  it('starts the app from the main bundle and packages all three bundles', () => {
    expect(config.extraMetadata.main).toBe(rel(bundles.main));
    for (const bundle of Object.values(bundles)) expect(inFiles(rel(bundle)), rel(bundle)).toBe(true);
    // where main looks for them at run time
    const layout = appLayout(join(PROJECT_ROOT, 'out', 'main'));
    expect(layout.preload).toBe(bundles.preload);
    expect(layout.engineHost).toBe(bundles.engineHost);
    expect(inFiles(`${rel(layout.renderer)}/index.html`)).toBe(true);
  });

  it('packages what the engine host bundle imports at run time', () => {
    const host = readFileSync(bundles.engineHost, 'utf8');
    const imports = [...host.matchAll(/^import .* from ["']([^"']+)["'];?$/gm)].map((match) => match[1]!).filter((name) => !name.startsWith('node:'));
    expect(imports).toEqual(expect.arrayContaining(['onnxruntime-node', '../../native/index.js']));
    for (const name of imports) {
      const path = name.startsWith('.') ? rel(join(PROJECT_ROOT, 'out', 'engine', name)) : `node_modules/${name}/package.json`;
      expect(inFiles(path), `${name} (${path})`).toBe(true);
    }
    expect(inFiles('native/build/Release/longhand.node')).toBe(true);
    expect(inFiles('node_modules/onnxruntime-common/package.json')).toBe(true);
    expect(inFiles('package.json')).toBe(true);
  });

  it('keeps the preload to one file that requires only electron', () => {
    const preload = readFileSync(bundles.preload, 'utf8');
    expect([...preload.matchAll(/require\("([^"]+)"\)/g)].map((match) => match[1])).toEqual(['electron']);
    expect(preload).not.toMatch(/from ["']zod["']|ZodError/);
  });
});
