#!/usr/bin/env node
// Coverage-guided fuzzing of the native core (native/fuzz/fuzz_*.cc, libFuzzer).
//
//   node scripts/native-fuzz.mjs [--seconds N] [--targets a,b] [--timeout S] [--build-only]
//
// Builds every target with clang++ -fsanitize=fuzzer,address,undefined (the core's sources are
// compiled once into native/fuzz/build/obj and rebuilt when a source or header changes), runs each
// for N seconds (-max_total_time) on its working corpus (native/fuzz/build/corpus/<target>, grown
// across runs) plus the committed seeds (native/fuzz/seeds/<target>), and prints per target:
// executions, exec/s, corpus size, coverage, crashes and hangs. A wrong result inside a target
// aborts, so it counts as a crash. Findings are kept in native/fuzz/build/findings/<target>/.
// Last line: "native-fuzz: N passed, N failed". Exit 0 when every target ran clean, 1 on any
// finding or build failure, 2 when no clang++ with libFuzzer is installed (nothing was run).
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { coreSources } from './native-sources.mjs';

const root = resolve(fileURLToPath(import.meta.url), '..', '..');
const native = join(root, 'native');
const fuzzDir = join(native, 'fuzz');
const out = join(fuzzDir, 'build');

// The core's sources: binding.gyp's longhand_core (native-sources.mjs).
const CORE = coreSources(native);
const SANITIZE = ['-fsanitize=address,undefined', '-fno-sanitize-recover=all', '-fno-omit-frame-pointer'];
const COMMON = ['-std=c++17', '-g', '-O1', '-march=x86-64-v2', '-pthread', '-Wall', '-Wno-unused-parameter'];

function parseArgs(argv) {
  const opts = { seconds: 30, timeout: 10, targets: null, buildOnly: false };
  for (let i = 0; i < argv.length; i += 1) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--seconds') opts.seconds = Number(value());
    else if (a === '--timeout') opts.timeout = Number(value());
    else if (a === '--targets') opts.targets = value().split(',').map((s) => s.trim()).filter(Boolean);
    else if (a === '--build-only') opts.buildOnly = true;
    else if (a === '--help' || a === '-h') {
      console.log('usage: node scripts/native-fuzz.mjs [--seconds N] [--targets a,b] [--timeout S] [--build-only]');
      process.exit(0);
    } else throw new Error(`unknown option ${a}`);
  }
  if (!Number.isInteger(opts.seconds) || opts.seconds < 1) throw new Error(`--seconds must be a positive integer, got ${opts.seconds}`);
  if (!Number.isInteger(opts.timeout) || opts.timeout < 1) throw new Error(`--timeout must be a positive integer, got ${opts.timeout}`);
  return opts;
}

// The first clang++ on PATH that links a libFuzzer program, or null.
function findClang() {
  const candidates = [process.env.FUZZ_CXX, 'clang++', 'clang++-19', 'clang++-18', 'clang++-17', 'clang++-16', 'clang++-15', 'clang++-14'].filter(Boolean);
  mkdirSync(out, { recursive: true });
  const probe = join(out, 'probe.cc');
  writeFileSync(probe, 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n');
  for (const cxx of candidates) {
    const r = spawnSync(cxx, ['-fsanitize=fuzzer,address,undefined', probe, '-o', join(out, 'probe')], { encoding: 'utf8' });
    if (r.status === 0) {
      const version = spawnSync(cxx, ['--version'], { encoding: 'utf8' }).stdout.split('\n')[0];
      return { cxx, version };
    }
  }
  return null;
}

const mtime = (p) => (existsSync(p) ? statSync(p).mtimeMs : 0);
const headers = () =>
  [join(native, 'src'), join(native, 'src', 'reference'), fuzzDir].flatMap((d) =>
    readdirSync(d).filter((f) => f.endsWith('.h')).map((f) => join(d, f)),
  );

// clang 14 ignores `#pragma GCC target`, which attention.cc uses around its AVX2 row operations;
// its equivalent is `#pragma clang attribute`. The build compiles a copy with the one pragma
// swapped, so the fuzzed AVX2 kernel is the same code the addon ships (and the build fails loudly
// if the pragmas it expects are gone).
function clangSource(rel) {
  if (rel !== 'src/attention.cc') return join(native, rel);
  const text = readFileSync(join(native, rel), 'utf8');
  const push = '#pragma GCC push_options\n#pragma GCC target("avx2,fma,f16c")';
  if (!text.includes(push) || !text.includes('#pragma GCC pop_options'))
    throw new Error('native/src/attention.cc no longer has the #pragma GCC target block this build rewrites for clang');
  const rewritten = text
    .replace(push, '#pragma clang attribute push (__attribute__((target("avx2,fma,f16c"))), apply_to = function)')
    .replace('#pragma GCC pop_options', '#pragma clang attribute pop');
  const copy = join(out, 'src', 'attention.cc');
  mkdirSync(dirname(copy), { recursive: true });
  if (!existsSync(copy) || readFileSync(copy, 'utf8') !== rewritten) writeFileSync(copy, rewritten);
  return copy;
}

function spawnAsync(cmd, args, options = {}) {
  return new Promise((resolvePromise) => {
    const child = spawn(cmd, args, { cwd: root, ...options });
    let text = '';
    child.stdout?.on('data', (d) => (text += d));
    child.stderr?.on('data', (d) => (text += d));
    child.on('close', (code, signal) => resolvePromise({ code, signal, text }));
  });
}

// Runs jobs (functions returning promises) `width` at a time.
async function pool(jobs, width) {
  const results = new Array(jobs.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(width, jobs.length) }, async () => {
      while (next < jobs.length) {
        const i = next++;
        results[i] = await jobs[i]();
      }
    }),
  );
  return results;
}

async function build(cxx, targets) {
  const objDir = join(out, 'obj');
  mkdirSync(objDir, { recursive: true });
  const newestHeader = Math.max(...headers().map(mtime));
  const width = Math.max(1, Math.min(2, availableParallelism()));
  const coreFlags = [...COMMON, '-fno-exceptions', '-include', join(fuzzDir, 'cpu_features_shim.h'), '-I', join(native, 'src'), '-fsanitize=fuzzer-no-link', ...SANITIZE];
  const objects = CORE.map((rel) => join(objDir, rel.replace(/^src\//, '').replace(/\//g, '_').replace(/\.cc$/, '.o')));
  const coreJobs = CORE.map((rel, i) => async () => {
    const src = clangSource(rel);
    const obj = objects[i];
    if (mtime(obj) > Math.max(mtime(join(native, rel)), mtime(src), newestHeader, mtime(fileURLToPath(import.meta.url)))) return { ok: true };
    // build beside, then rename: another checkout's `npm test` may be linking or running these
    const tmp = `${obj}.${process.pid}.tmp`;
    const r = await spawnAsync(cxx, [...coreFlags, '-c', src, '-o', tmp]);
    if (r.code !== 0) return { ok: false, what: rel, text: r.text };
    renameSync(tmp, obj);
    return { ok: true };
  });
  const core = await pool(coreJobs, width);
  const coreFailed = core.filter((r) => !r.ok);
  for (const f of coreFailed) console.log(`build failed: ${f.what}\n${f.text}`);
  const newestObject = Math.max(...objects.map(mtime));
  const targetJobs = targets.map((t) => async () => {
    if (coreFailed.length > 0) return { ok: false, text: 'the core did not build' };
    const src = join(fuzzDir, `fuzz_${t}.cc`);
    const bin = join(out, `fuzz_${t}`);
    if (mtime(bin) > Math.max(mtime(src), newestHeader, newestObject)) return { ok: true };
    const tmp = `${bin}.${process.pid}.tmp`;
    const r = await spawnAsync(cxx, [...COMMON, '-include', join(fuzzDir, 'cpu_features_shim.h'), '-fsanitize=fuzzer', ...SANITIZE, src, ...objects, '-o', tmp]);
    if (r.code === 0) renameSync(tmp, bin);  // a running binary keeps its old inode
    return { ok: r.code === 0, text: r.text };
  });
  const built = await pool(targetJobs, width);
  return targets.map((t, i) => ({ target: t, ok: built[i].ok, text: built[i].text }));
}

function countFiles(dir) {
  if (!existsSync(dir)) return 0;
  return readdirSync(dir).filter((f) => statSync(join(dir, f)).isFile()).length;
}

async function runTarget(target, opts) {
  const bin = join(out, `fuzz_${target}`);
  const corpus = join(out, 'corpus', target);
  const seeds = join(fuzzDir, 'seeds', target);
  const findings = join(out, 'findings', target);
  rmSync(findings, { recursive: true, force: true });
  mkdirSync(corpus, { recursive: true });
  mkdirSync(findings, { recursive: true });
  const args = [
    `-max_total_time=${opts.seconds}`,
    `-timeout=${opts.timeout}`,
    '-rss_limit_mb=2048',
    '-print_final_stats=1',
    `-artifact_prefix=${findings}/`,
    corpus,
    ...(existsSync(seeds) ? [seeds] : []),
  ];
  const started = Date.now();
  // Leaks count as findings (libFuzzer's own leak check); UBSan stops at the first report.
  const env = { ...process.env, ASAN_OPTIONS: 'detect_leaks=1:abort_on_error=1:symbolize=1', UBSAN_OPTIONS: 'print_stacktrace=1:halt_on_error=1' };
  const r = await spawnAsync(bin, args, { env, cwd: out });
  const wall = (Date.now() - started) / 1000;
  const logDir = join(out, 'logs');
  mkdirSync(logDir, { recursive: true });
  writeFileSync(join(logDir, `${target}.log`), r.text);
  const stat = (name) => {
    const m = new RegExp(`stat::${name}:\\s+(\\d+)`).exec(r.text);
    return m ? Number(m[1]) : null;
  };
  const done = [...r.text.matchAll(/#(\d+)\s+(?:DONE|pulse|NEW|REDUCE|INITED)\s+cov: (\d+) ft: (\d+) corp: (\d+)\/(\S+)/g)].pop();
  const files = readdirSync(findings);
  const hangs = files.filter((f) => f.startsWith('timeout-')).length;
  let crashes = files.filter((f) => /^(crash|leak|oom|slow-unit-never)-/.test(f)).length;
  const clean = r.code === 0 && hangs === 0 && crashes === 0;
  if (!clean && crashes === 0 && hangs === 0) crashes = 1;  // died without an artifact: still a finding
  return {
    target,
    executions: stat('number_of_executed_units') ?? (done ? Number(done[1]) : 0),
    execPerSec: stat('average_exec_per_sec') ?? 0,
    newUnits: stat('new_units_added') ?? 0,
    corpus: done ? Number(done[4]) : countFiles(corpus),
    corpusBytes: done ? done[5] : '?',
    corpusFiles: countFiles(corpus),
    cov: done ? Number(done[2]) : 0,
    ft: done ? Number(done[3]) : 0,
    peakRssMb: stat('peak_rss_mb') ?? 0,
    crashes,
    hangs,
    wall,
    clean,
    tail: clean ? '' : r.text.split('\n').slice(-60).join('\n'),
    findings: files.map((f) => relative(root, join(findings, f))),
  };
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const all = readdirSync(fuzzDir)
    .filter((f) => /^fuzz_.*\.cc$/.test(f))
    .map((f) => basename(f, '.cc').slice('fuzz_'.length))
    .sort();
  const targets = opts.targets ?? all;
  const unknown = targets.filter((t) => !all.includes(t));
  if (unknown.length > 0) throw new Error(`unknown target(s) ${unknown.join(', ')}; the targets are ${all.join(', ')}`);

  const clang = findClang();
  if (clang === null) {
    console.log('native-fuzz: no clang++ with libFuzzer found (apt-get install clang); nothing was fuzzed');
    process.exit(2);
  }
  console.log(`native-fuzz: ${clang.version}; targets ${targets.join(', ')}; ${opts.seconds} s each, -timeout=${opts.timeout}`);
  const t0 = Date.now();
  const built = await build(clang.cxx, targets);
  console.log(`native-fuzz: build ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  let passed = 0;
  let failed = 0;
  for (const b of built) {
    if (!b.ok) {
      failed += 1;
      console.log(`FAIL  fuzz ${b.target}: build failed\n${b.text}`);
    }
  }
  if (!opts.buildOnly) {
    const rows = [];
    for (const b of built.filter((x) => x.ok)) {
      const r = await runTarget(b.target, opts);
      rows.push(r);
      if (r.clean) passed += 1;
      else failed += 1;
      console.log(
        `${r.clean ? 'ok  ' : 'FAIL'}  fuzz ${r.target}: ${r.executions} executions (${r.execPerSec} exec/s) in ${r.wall.toFixed(0)} s, ` +
          `corpus ${r.corpus} inputs/${r.corpusBytes} (${r.newUnits} new), cov ${r.cov} ft ${r.ft}, ` +
          `crashes ${r.crashes}, hangs ${r.hangs}, peak RSS ${r.peakRssMb} MB`,
      );
      if (!r.clean) console.log(`${r.tail}\nfindings: ${r.findings.join(', ') || '(none written)'}`);
    }
    if (rows.length > 0) {
      const tot = rows.reduce((a, r) => ({ e: a.e + r.executions, c: a.c + r.crashes, h: a.h + r.hangs }), { e: 0, c: 0, h: 0 });
      console.log(`native-fuzz: ${rows.length} targets, ${tot.e} executions, ${tot.c} crashes, ${tot.h} hangs`);
    }
  } else {
    passed = built.filter((b) => b.ok).length;
  }
  console.log(`native-fuzz: ${passed} passed, ${failed} failed`);
  process.exit(failed > 0 ? 1 : 0);
}

main().catch((e) => {
  console.error(`native-fuzz: ${e.message}`);
  process.exit(1);
});
