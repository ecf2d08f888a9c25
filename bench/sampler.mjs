#!/usr/bin/env node
// The sampler's cost per token at a Llama vocabulary (V = 32,000), for greedy with a repetition
// penalty, top-p 0.9 at temperature 0.8 and the defaults, on flat logits (roughly normal, σ ≈ 2.3:
// top-p 0.9 keeps ~6,000 tokens, a pessimistic case) and peaked ones (20 tokens 12 nats ahead,
// closer to a trained model). Best of 5 rounds of 40 samples after 50 warm-up ones. A decode step
// of the 1 GB fixture takes 40-80 ms on this machine, so ~1 ms here is what keeps sampling out of
// the picture. Was a timed assertion in sampler.test.ts; timings belong here, not in `npm test`.
// Usage: node --import tsx bench/sampler.mjs [--vocab 32000] [--rounds 5]
import { parseArgs } from 'node:util';
import { performance } from 'node:perf_hooks';
import { createSampler, DEFAULT_SAMPLING_PARAMS } from '../app/engine/generate/sampler.ts';
import { Rng } from '../app/engine/generate/rng.ts';

const { values } = parseArgs({ options: { vocab: { type: 'string', default: '32000' }, rounds: { type: 'string', default: '5' } } });
const V = Number(values.vocab);
const rounds = Number(values.rounds);

function randomLogits(n, seed, scale) {
  const rng = new Rng(seed);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = (rng.nextFloat() + rng.nextFloat() + rng.nextFloat() + rng.nextFloat() - 2) * scale;
  return out;
}

const flat = randomLogits(V, 77, 4);
const peaked = flat.map((x, i) => (i % 1600 === 0 ? x + 12 : x));
const history = Array.from({ length: 200 }, (_, i) => (i * 7919) % V);
const plain = { ...DEFAULT_SAMPLING_PARAMS, temperature: 1, topK: 0, topP: 1, minP: 0, seed: 1 };

function msPerSample(params, logits) {
  const s = createSampler(params, V);
  for (let i = 0; i < 50; i++) s.sample(logits, history);
  let best = Infinity;
  for (let round = 0; round < rounds; round++) {
    const t0 = performance.now();
    for (let i = 0; i < 40; i++) s.sample(logits, history);
    best = Math.min(best, (performance.now() - t0) / 40);
  }
  return best;
}

console.log(`sample() at V = ${V}, ms per token (best of ${rounds} rounds of 40)\n`);
console.log('| logits | greedy + repetition penalty 1.1 | top-p 0.9, temperature 0.8 | defaults |');
console.log('|---|---:|---:|---:|');
for (const [name, logits] of [['flat', flat], ['peaked', peaked]]) {
  const greedy = msPerSample({ ...plain, temperature: 0, repetitionPenalty: 1.1 }, logits);
  const topP = msPerSample({ ...plain, temperature: 0.8, topP: 0.9 }, logits);
  const defaults = msPerSample({ ...DEFAULT_SAMPLING_PARAMS, seed: 1 }, logits);
  console.log(`| ${name} | ${greedy.toFixed(3)} | ${topP.toFixed(3)} | ${defaults.toFixed(3)} |`);
}
