#!/usr/bin/env node
// The native C++ tests under AddressSanitizer and UndefinedBehaviorSanitizer, or (--thread) under
// ThreadSanitizer.
//
//   node scripts/native-sanitize.mjs [--thread]
//
// Compiles native/test/native_tests.cc and the core's sources with g++ (clang++ if CXX says so)
// -fsanitize=address,undefined -fno-sanitize-recover=all -g -O1 into native/fuzz/build/sanitize/
// (--thread: -fsanitize=thread into native/fuzz/build/sanitize-thread/), apart from native/build,
// which the addon's node-gyp build owns; one object per source, rebuilt when a source or header
// changes, and runs the tests (--no-bench). Any sanitizer report stops the run with a non-zero exit:
// under --thread that is every data race between the speculator's worker and the caller's thread
// (the tests run the worker beside appends to the same layer, evicting pools included).
// Last line: "native-sanitize: passed" or "native-sanitize: failed (why)".
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, renameSync, statSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { coreSources, testSources } from './native-sources.mjs';

const root = resolve(fileURLToPath(import.meta.url), '..', '..');
const native = join(root, 'native');
const thread = process.argv.includes('--thread');
const out = join(native, 'fuzz', 'build', thread ? 'sanitize-thread' : 'sanitize');
const cxx = process.env.CXX || 'g++';
const which = thread ? '-fsanitize=thread' : '-fsanitize=address,undefined';

// binding.gyp's longhand_core plus the tests' own sources.
const SOURCES = [...coreSources(native), ...testSources(native)];
const FLAGS = ['-std=c++17', '-g', '-O1', '-march=x86-64-v2', '-pthread', '-fno-exceptions', '-fno-omit-frame-pointer',
  ...(thread ? ['-fsanitize=thread'] : ['-fsanitize=address,undefined', '-fno-sanitize-recover=all'])];

const mtime = (p) => (existsSync(p) ? statSync(p).mtimeMs : 0);

function finish(ok, why = '') {
  console.log(ok ? 'native-sanitize: passed' : `native-sanitize: failed (${why})`);
  process.exit(ok ? 0 : 1);
}

function compile(src, obj) {
  return new Promise((done) => {
    // build beside, then rename: a concurrent run (another `npm test`) never sees half an object
    const tmp = `${obj}.${process.pid}.tmp`;
    const child = spawn(cxx, [...FLAGS, '-c', join(native, src), '-o', tmp], { cwd: root, stdio: ['ignore', 'inherit', 'inherit'] });
    child.on('close', (code) => {
      if (code === 0) renameSync(tmp, obj);
      done(code === 0);
    });
  });
}

async function main() {
  mkdirSync(out, { recursive: true });
  const newestHeader = Math.max(
    ...[join(native, 'src'), join(native, 'src', 'reference'), join(native, 'test')].flatMap((d) => readdirSync(d).filter((f) => f.endsWith('.h')).map((f) => mtime(join(d, f)))),
    mtime(fileURLToPath(import.meta.url)),
  );
  const objects = SOURCES.map((s) => join(out, s.replace(/\//g, '_').replace(/\.cc$/, '.o')));
  const todo = SOURCES.map((s, i) => ({ s, o: objects[i] })).filter(({ s, o }) => mtime(o) <= Math.max(mtime(join(native, s)), newestHeader));
  const started = Date.now();
  let next = 0;
  let ok = true;
  const width = Math.max(1, Math.min(2, availableParallelism()));
  await Promise.all(
    Array.from({ length: Math.min(width, todo.length) }, async () => {
      while (next < todo.length) {
        const { s, o } = todo[next++];
        if (!(await compile(s, o))) {
          console.log(`native-sanitize: cannot compile ${s}`);
          ok = false;
        }
      }
    }),
  );
  if (!ok) finish(false, 'build');
  const bin = join(out, 'native_tests');
  if (todo.length > 0 || !existsSync(bin)) {
    const tmp = `${bin}.${process.pid}.tmp`;
    const link = spawnSync(cxx, [...FLAGS, ...objects, '-o', tmp], { cwd: root, stdio: 'inherit' });
    if (link.status !== 0) finish(false, 'link');
    renameSync(tmp, bin);
  }
  console.log(`native-sanitize: ${cxx} ${which} -O1, built in ${((Date.now() - started) / 1000).toFixed(1)} s (${todo.length} of ${SOURCES.length} sources compiled)`);
  // halt_on_error + abort: the first report ends the run with a failure; leaks are reported at exit.
  const env = {
    ...process.env,
    ASAN_OPTIONS: 'detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1',
    UBSAN_OPTIONS: 'print_stacktrace=1:halt_on_error=1',
    TSAN_OPTIONS: 'halt_on_error=1:exitcode=66:second_deadlock_stack=1',
  };
  const run = spawnSync(bin, ['--no-bench'], { cwd: root, env, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 64 << 20 });
  process.stdout.write(run.stdout ?? '');
  process.stdout.write(run.stderr ?? '');
  const m = /native: (\d+) passed, (\d+) failed/.exec(run.stdout ?? '');
  if (run.status !== 0 || !m) finish(false, m ? `exit ${run.status ?? run.signal}, ${m[2]} tests failed` : `exit ${run.status ?? run.signal} before the summary line (a sanitizer report above)`);
  finish(true);
}

main().catch((e) => finish(false, e.message));
