#!/usr/bin/env node
// Decode attention kernel microbenchmark: ms per call of one layer's decode attention, the previous
// AVX2 kernel (avx2-per-head: per row and query head a dot, a scalar exp and an axpy) beside the
// grouped kernels (each K/V row widened once per KV head for all of its query heads, vector exp),
// GQA 32/4 and MHA 32/32, head_dim 64, fp16 rows, 2,048 / 8,192 / 32,768 tokens, full attention and
// a listed 10% of the rows, 1 and 2 threads. The timing loop is C++ (native_tests --bench-kernels):
// no JS call overhead in the figures. Each figure is the minimum of --reps calls in one process, so
// other load on the machine only inflates figures, never deflates them; check `uptime`.
// Usage: node bench/attention-kernel.mjs [--reps 7]   (after npm run build:native)
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { loadavg } from 'node:os';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';

const { values } = parseArgs({ options: { reps: { type: 'string', default: '7' } } });
const reps = Number.parseInt(values.reps, 10);
if (!(reps >= 1)) throw new Error(`--reps must be a positive integer, got ${values.reps}`);
const bin = fileURLToPath(new URL('../native/build/Release/native_tests', import.meta.url));
if (!existsSync(bin)) {
  console.error(`${bin} is missing: run npm run build:native first`);
  process.exit(1);
}
console.log(`load average before: ${loadavg().map((x) => x.toFixed(2)).join(' ')}`);
const run = spawnSync(bin, ['--bench-kernels', String(reps)], { stdio: 'inherit' });
console.log(`load average after: ${loadavg().map((x) => x.toFixed(2)).join(' ')}`);
process.exit(run.status ?? 1);
