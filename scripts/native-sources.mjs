// The native core's sources, read from binding.gyp's longhand_core target: the one list the addon,
// the sanitizer build (native-sanitize.mjs) and the fuzz build (native-fuzz.mjs) all compile, so a
// source added to the core cannot be missing from the other two builds (it was: infinigen_score.cc
// linked into the addon and left both scripts with undefined references).
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

function targetSources(nativeDir, name) {
  const text = readFileSync(join(nativeDir, 'binding.gyp'), 'utf8');
  // gyp is JSON with # comments and trailing commas (no '#' appears inside this file's strings)
  const json = text
    .split('\n')
    .map((line) => line.replace(/#.*$/, ''))
    .join('\n')
    .replace(/,(\s*[\]}])/g, '$1');
  const target = JSON.parse(json).targets.find((t) => t.target_name === name);
  if (!target || !Array.isArray(target.sources) || target.sources.length === 0) throw new Error(`native/binding.gyp: no ${name} target with sources`);
  return target.sources;
}

/** Paths relative to `nativeDir` (e.g. 'src/kv_pool.cc'), in binding.gyp's order. */
export function coreSources(nativeDir) {
  return targetSources(nativeDir, 'longhand_core');
}

/** The native_tests executable's own sources (e.g. 'test/native_tests.cc'), in binding.gyp's order. */
export function testSources(nativeDir) {
  return targetSources(nativeDir, 'native_tests');
}
