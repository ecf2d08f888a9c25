// Ad-hoc benchmark (not part of npm test): decode tokens/s and prefill tokens/s of the forward
// pass on a GGUF file, with the time split by part (stage graphs, LM head stage, KV append,
// attention, embedding, the rest).
//   npx tsx app/engine/forward/bench-forward.ts <model.gguf> [threads=1,2] [prompt=512] [decode=32]
import { loadModel } from '../model/load-model.ts';
import { createModelRunner, type ForwardTimings } from './model-runner.ts';

const [path, threadList = '1,2', promptArg = '512', decodeArg = '32'] = process.argv.slice(2);
if (!path) throw new Error('usage: bench-forward.ts <model.gguf> [threads] [prompt tokens] [decode tokens]');
const promptTokens = Number(promptArg);
const decodeTokens = Number(decodeArg);

const model = await loadModel(path);
const vocab = model.hyper.vocabSize;
const prompt = Array.from({ length: promptTokens }, (_, i) => 1 + ((i * 7919) % (vocab - 1)));

function breakdown(t: ForwardTimings): string {
  const per = (ms: number): string => `${(ms / t.calls).toFixed(2)}`;
  return `per call (ms): stages ${per(t.layerGraphs)} | head stage ${per(t.headGraph)} | append ${per(t.append)} | attention ${per(t.attention)} | embedding ${per(t.embedding)} | other JS ${per(t.other)} | total ${per(t.total)}`;
}

for (const threads of threadList.split(',').map(Number)) {
  const t0 = performance.now();
  const runner = await createModelRunner(model, { threads, contextLength: promptTokens + decodeTokens + 8 });
  console.log(`threads ${threads}: build ${((performance.now() - t0) / 1000).toFixed(1)} s, graph weights ${(runner.graphWeightBytes / 2 ** 20).toFixed(0)} MiB, pool ${(runner.poolBytes / 2 ** 20).toFixed(1)} MiB`);
  // warm-up
  await runner.prefill(prompt.slice(0, 16));
  for (let i = 0; i < 3; i++) await runner.decode(5);
  runner.reset();
  runner.resetTimings();
  let a = performance.now();
  let logits = await runner.prefill(prompt);
  const prefillMs = performance.now() - a;
  const pt = runner.timings();
  console.log(`  prefill ${promptTokens} tokens: ${prefillMs.toFixed(0)} ms = ${((promptTokens * 1000) / prefillMs).toFixed(1)} tok/s; ${breakdown(pt)} (per chunk)`);
  runner.resetTimings();
  a = performance.now();
  for (let i = 0; i < decodeTokens; i++) {
    let best = 0;
    for (let j = 1; j < logits.length; j++) if (logits[j]! > logits[best]!) best = j;
    logits = await runner.decode(best);
  }
  const decodeMs = performance.now() - a;
  const dt = runner.timings();
  console.log(`  decode ${decodeTokens} tokens after the prompt: ${(decodeMs / decodeTokens).toFixed(1)} ms/token = ${((decodeTokens * 1000) / decodeMs).toFixed(2)} tok/s; ${breakdown(dt)}`);
  await runner.dispose();
}
model.close();
