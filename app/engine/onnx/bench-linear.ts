// Ad-hoc benchmark (not part of npm test): one Linear(K, N) at M = 1 (a decoding step) through
// fp32 MatMul and MatMulNBits 4/8-bit (accuracy_level 4 and 0), at 1 and 2 intra-op threads.
//   npx tsx app/engine/onnx/bench-linear.ts [K] [N] [iterations]

import { GraphBuilder } from './graph-builder.ts';
import { quantizeNBits } from './matmul-nbits.ts';
import { linear, type LinearWeights } from './ops.ts';
import { createSession } from './session.ts';
import { randomArray } from './test-helpers.ts';

const K = Number(process.argv[2] ?? 2048);
const N = Number(process.argv[3] ?? 2048);
const ITER = Number(process.argv[4] ?? 50);

const w = randomArray(N * K, 1, 0.05);
const x = randomArray(K, 2);
const variants: [string, LinearWeights][] = [
  ['fp32 MatMul', { kind: 'f32', outFeatures: N, inFeatures: K, weight: w }],
  ['NBits 4-bit acc4', { kind: 'nbits', packed: quantizeNBits(w, N, K, 4), accuracyLevel: 4 }],
  ['NBits 4-bit acc0', { kind: 'nbits', packed: quantizeNBits(w, N, K, 4), accuracyLevel: 0 }],
  ['NBits 8-bit acc4', { kind: 'nbits', packed: quantizeNBits(w, N, K, 8), accuracyLevel: 4 }],
  ['NBits 8-bit acc0', { kind: 'nbits', packed: quantizeNBits(w, N, K, 8), accuracyLevel: 0 }],
];

console.log(`Linear ${K} -> ${N}, M = 1, median of ${ITER} runs (ms)`);
console.log(['variant', 'weight MB', '1 thread', '2 threads'].join('\t'));
for (const [label, lw] of variants) {
  const g = new GraphBuilder(label);
  g.output(linear(g, g.input('x', 'float32', [1, K]), lw, 'y'), 'float32', [1, N]);
  const model = g.toModel();
  const cells = [label, (g.weightBytes / 1e6).toFixed(1)];
  for (const threads of [1, 2]) {
    const s = await createSession(model, { intraOpThreads: threads });
    const feeds = { x: { elemType: 'float32' as const, dims: [1, K], data: x } };
    for (let i = 0; i < 5; i++) await s.run(feeds);
    const times: number[] = [];
    for (let i = 0; i < ITER; i++) {
      const t0 = performance.now();
      await s.run(feeds);
      times.push(performance.now() - t0);
    }
    times.sort((a, b) => a - b);
    cells.push(times[Math.floor(ITER / 2)]!.toFixed(3));
    await s.release();
  }
  console.log(cells.join('\t'));
}
