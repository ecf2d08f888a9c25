#!/usr/bin/env node
// `npm test`: every check a change must pass, in the order that fails fastest.
//   1. the native addon is built (the install step builds it; rebuild here if it is missing)
//   2. the native C++ tests (scalar references vs optimised kernels, guard bytes), then the same
//      tests under ASan + UBSan and under TSan (scripts/native-sanitize.mjs [--thread]), then every libFuzzer target of
//      native/fuzz for LONGHAND_FUZZ_SECONDS (default 20) each (scripts/native-fuzz.mjs; needs
//      clang: skipped without it, a failure under CI=true)
//   3. lint (including the layering rule) and the TypeScript type check
//   4. every TypeScript test through Vitest
// It ends with one plain line, "N passed, N failed, N skipped", counting native and Vitest tests.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(fileURLToPath(import.meta.url), '..', '..');
const nativeAddon = join(root, 'native', 'build', 'Release', 'longhand.node');
const nativeTests = join(root, 'native', 'build', 'Release', 'native_tests');
const bin = (name) => join(root, 'node_modules', '.bin', name);
const totals = { passed: 0, failed: 0, skipped: 0 };

function run(label, command, args, options = {}) {
  const started = Date.now();
  console.log(`\n▶ ${label}: ${[command, ...args].join(' ')}`);
  const result = spawnSync(command, args, { cwd: root, stdio: options.capture ? ['ignore', 'pipe', 'inherit'] : 'inherit', encoding: 'utf8', maxBuffer: 64 << 20 });
  if (options.capture) process.stdout.write(result.stdout ?? '');
  console.log(`◀ ${label}: exit ${result.status ?? result.signal} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return result;
}

function finish(extraFailure) {
  if (extraFailure) totals.failed += 1;
  console.log(`\n${totals.passed} passed, ${totals.failed} failed, ${totals.skipped} skipped`);
  process.exit(totals.failed > 0 ? 1 : 0);
}

// A fresh clone was built by `npm ci`; a working tree may hold a binary older than the sources,
// so make rebuilds whatever changed (a second or two when nothing did).
const configured = existsSync(join(root, 'native', 'build', 'Makefile'));
const build = run('build native addon', 'npm', ['run', '--silent', configured ? 'build:native:changed' : 'build:native']);
if (build.status !== 0 || !existsSync(nativeAddon)) finish('native build failed');

// Native C++ tests print "native: N passed, N failed" as their last line.
if (existsSync(nativeTests)) {
  const native = run('native C++ tests', nativeTests, [], { capture: true });
  const match = /native: (\d+) passed, (\d+) failed/.exec(native.stdout ?? '');
  if (match) {
    totals.passed += Number(match[1]);
    totals.failed += Number(match[2]);
  }
  if (native.status !== 0 && (!match || Number(match[2]) === 0)) totals.failed += 1;
}

// The same tests under AddressSanitizer + UndefinedBehaviorSanitizer: one check.
const sanitize = run('native C++ tests under ASan+UBSan', process.execPath, [join(root, 'scripts', 'native-sanitize.mjs')]);
if (sanitize.status === 0) totals.passed += 1;
else totals.failed += 1;

// And under ThreadSanitizer: the speculator's worker scores a layer while this thread appends to it
// (evicting pools too); any data race between them is a failure. One check.
const threads = run('native C++ tests under TSan', process.execPath, [join(root, 'scripts', 'native-sanitize.mjs'), '--thread']);
if (threads.status === 0) totals.passed += 1;
else totals.failed += 1;

// Bounded coverage-guided fuzzing of the native core: one check per target. Exit 2 means no clang
// with libFuzzer is installed: a skip on a developer machine, a failure in CI (.ci/run installs it).
const fuzzSeconds = process.env.LONGHAND_FUZZ_SECONDS ?? '10';
const fuzz = run(`native fuzz (${fuzzSeconds} s per target)`, process.execPath, [join(root, 'scripts', 'native-fuzz.mjs'), '--seconds', fuzzSeconds], { capture: true });
const fuzzCounts = /native-fuzz: (\d+) passed, (\d+) failed/.exec(fuzz.stdout ?? '');
if (fuzz.status === 2 && process.env.CI === 'true') {
  console.log('native fuzz: clang++ with libFuzzer is required under CI=true');
  totals.failed += 1;
} else if (fuzz.status === 2) {
  console.log('native fuzz: skipped (no clang++ with libFuzzer; apt-get install clang)');
  totals.skipped += 1;
} else if (fuzzCounts) {
  totals.passed += Number(fuzzCounts[1]);
  totals.failed += Number(fuzzCounts[2]);
  if (fuzz.status !== 0 && Number(fuzzCounts[2]) === 0) totals.failed += 1;
} else {
  totals.failed += 1;
}

const lint = run('lint', process.execPath, [bin('eslint'), '--max-warnings=0', '.']);
if (lint.status !== 0) totals.failed += 1;
const types = run('typecheck', process.execPath, [bin('tsc'), '-p', 'tsconfig.json']);
if (types.status !== 0) totals.failed += 1;
const rendererTypes = run('typecheck renderer', process.execPath, [bin('tsc'), '-p', 'renderer/tsconfig.json']);
if (rendererTypes.status !== 0) totals.failed += 1;

const reportDir = mkdtempSync(join(tmpdir(), 'longhand-test-'));
const reportFile = join(reportDir, 'vitest.json');
const vitest = run('vitest', process.execPath, [bin('vitest'), 'run', '--reporter=default', '--reporter=json', `--outputFile.json=${reportFile}`, ...process.argv.slice(2)]);
if (existsSync(reportFile)) {
  const report = JSON.parse(readFileSync(reportFile, 'utf8'));
  totals.passed += report.numPassedTests;
  totals.failed += report.numFailedTests;
  totals.skipped += report.numPendingTests + (report.numTodoTests ?? 0);
  // A suite that fails to load has no failed *tests*; count it so the run still fails.
  if (vitest.status !== 0 && report.numFailedTests === 0) totals.failed += 1;
} else if (vitest.status !== 0) {
  totals.failed += 1;
}
rmSync(reportDir, { recursive: true, force: true });
finish();
