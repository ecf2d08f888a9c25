// Why InfiniGen selects what it selects, per layer and head (issue 15). Not part of `npm test`.
//
//   node --import tsx bench/infinigen-diagnose.mjs [--model PATH] [--generated 2] [--tokens 900] [--context 1024]
//        [--alpha 5] [--cap 0.2] [--partial 0.3] [--dense 2] [--prefill 8] [--skew self|text] [--column-tokens 8]
//        [--source spec|ownNorm|true] [--every 8] [--engine] [--json FILE]
//
// Texts: the held-out passages of ../shared/models/kjv-eval/ (or none for other models) and
// `--generated` texts the model writes at temperature 0.8 (seeds 1001…, as bench/accuracy.mjs).
// A plain forward pass (app/engine/eval/attention-capture.ts) records every layer's true q, k and
// speculation queries; app/engine/eval/infinigen-diagnose.ts then measures, over the teacher-forced
// decode steps, per sparse layer and query head: attention recall of InfiniGen's set vs the oracle
// set of the same size (and of the two halves of the approximation: full-width speculation query
// alone, true query with the column cut alone), Spearman rank correlation of the speculation's
// scores with the true scores, and the energy share of the partial columns.
//   --skew self   A from CALIBRATION_TOKENS greedy tokens from BOS (what the engine does for a
//                 short prompt); text: A from each text's own queries (a calibration on the prompt)
//   --column-tokens  the partial columns from the text's first N tokens (the engine: the prompt)
//   --column-rule    qk (the engine: Σ|qA| + Σ|kA|), q, qkvar (Σ(qA)² · Var(kA)), eigen (see infinigen-diagnose.ts)
//   --source      the speculation query: spec = layer ℓ−1's normed input × W_q^ℓ (the engine),
//                 ownNorm = h_{ℓ−1} normed with layer ℓ's weight, true = the layer's own query
//   --engine      also runs the engine (policy infinigen, inspect) on each text and prints its
//                 per-layer recall beside ours (same skew only with --skew self)
import { writeFileSync, readdirSync, readFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { AttentionCapturer } from '../app/engine/eval/attention-capture.ts';
import { columnsFromCapture, diagnoseText, partialCount } from '../app/engine/eval/infinigen-diagnose.ts';
import { teacherForce } from '../app/engine/eval/accuracy.ts';
import { CALIBRATION_TOKENS } from '../app/engine/forward/policy/infinigen-state.ts';
import { createModelRunner } from '../app/engine/forward/model-runner.ts';
import { createSampler, resolveSamplingParams } from '../app/engine/generate/sampler.ts';
import { SkewCalibrator } from '../app/engine/kv/skew.ts';
import { loadModel } from '../app/engine/model/load-model.ts';
import { createTokenizer } from '../app/engine/model/tokenizer/tokenizer.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const { values } = parseArgs({
  options: {
    model: { type: 'string', default: join(ROOT, '..', 'shared', 'models', 'kjv-llama-hd64.gguf') },
    generated: { type: 'string', default: '2' },
    tokens: { type: 'string', default: '900' },
    context: { type: 'string', default: '1024' },
    alpha: { type: 'string', default: '5' },
    cap: { type: 'string', default: '0.2' },
    partial: { type: 'string', default: '0.3' },
    dense: { type: 'string', default: '2' },
    prefill: { type: 'string', default: '8' },
    skew: { type: 'string', default: 'self' },
    'column-tokens': { type: 'string' },
    'column-rule': { type: 'string', default: 'qk' },
    source: { type: 'string', default: 'spec' },
    every: { type: 'string', default: '8' },
    engine: { type: 'boolean', default: false },
    json: { type: 'string' },
  },
});
const alpha = Number(values.alpha);
const cap = Number(values.cap);
const r = Number(values.partial);
const denseLayers = Number(values.dense);
const prefill = Number(values.prefill);
const columnTokens = Number(values['column-tokens'] ?? prefill);
console.log(`command: node --import tsx bench/infinigen-diagnose.mjs ${process.argv.slice(2).join(' ')}`.trim());

const model = await loadModel(values.model);
const tokenizer = await createTokenizer(model.tokenizer);
const context = Math.min(Number(values.context), model.hyper.contextLength);
const { layers, heads, kvHeads, headDim: d } = model.hyper;
const p = partialCount(r, d);
const capturer = new AttentionCapturer(model, context);

// ---------------------------------------------------------------- texts (as bench/accuracy.mjs)
const texts = [];
const full = await createModelRunner(model, { contextLength: context });
for (let i = 0; i < Number(values.generated); i++) {
  const sampler = createSampler(resolveSamplingParams({ temperature: 0.8, seed: 1001 + i }), full.vocabSize);
  full.reset();
  const ids = [tokenizer.bos ?? 1];
  let logits = await full.prefill(ids);
  while (ids.length < Math.min(Number(values.tokens), context)) {
    for (const e of tokenizer.eosIds) logits[e] = -Infinity;
    const id = sampler.sample(logits, ids);
    ids.push(id);
    logits = await full.decode(id);
  }
  texts.push({ name: `generated seed ${1001 + i}`, ids });
}
const evalDir = join(dirname(values.model), 'kjv-eval');
if (basename(values.model).startsWith('kjv')) {
  for (const f of readdirSync(evalDir).filter((f) => f.endsWith('.txt')).sort()) {
    texts.push({ name: f.replace(/\.txt$/, ''), ids: tokenizer.encode(readFileSync(join(evalDir, f), 'utf8'), { addSpecial: true }).slice(0, context) });
  }
}

// ---------------------------------------------------------------- skew
function calibrate(captures) {
  const cal = new SkewCalibrator(layers, kvHeads, heads, d);
  for (const c of captures) for (let l = 0; l < layers; l++) cal.addQueries(l, c.q[l], c.tokens);
  return cal.finish();
}
let selfSkew;
if (values.skew === 'self') {
  // the engine's calibration for a short prompt: CALIBRATION_TOKENS greedy tokens from BOS
  full.reset();
  const ids = [tokenizer.bos ?? 1];
  let logits = await full.prefill(ids);
  while (ids.length < CALIBRATION_TOKENS) {
    let best = 0;
    for (let j = 1; j < logits.length; j++) if (logits[j] > logits[best]) best = j;
    ids.push(best);
    logits = await full.decode(best);
  }
  selfSkew = calibrate([capturer.run(ids)]);
}
await full.dispose();

// ---------------------------------------------------------------- per text
const opts = { alpha, cap, denseLayers, prefill, source: values.source, sampleEvery: Number(values.every) };
let acc = [];
const engineRecall = new Float64Array(layers);
const engineSteps = new Float64Array(layers);
const cacheDir = mkdtempSync(join(tmpdir(), 'longhand-diag-'));
for (const t of texts) {
  const c = capturer.run(t.ids);
  const skew = selfSkew ?? calibrate([c]);
  const cols = columnsFromCapture(c, skew, r, columnTokens, values['column-rule']);
  acc = diagnoseText(c, skew, cols, p, opts, acc);
  process.stderr.write(`${t.name} (${t.ids.length} tokens) done\n`);
  if (values.engine) {
    const runner = await createModelRunner(model, { contextLength: context, policy: 'infinigen', infinigen: { alpha, fetchCap: cap, partialRatio: r, denseLayers, inspect: true, cacheDir } });
    await teacherForce(runner, t.ids, { prefillTokens: prefill }, (_i, _l, stats) => {
      for (const l of stats?.layers ?? []) {
        if (l.dense) continue;
        engineRecall[l.layer] += l.recall;
        engineSteps[l.layer] += 1;
      }
    });
    await runner.dispose();
  }
}
rmSync(cacheDir, { recursive: true, force: true });
model.close();

// ---------------------------------------------------------------- report
const pct = (x) => `${(100 * x).toFixed(1)}`;
console.log(`\n${texts.length} texts (${texts.map((t) => `${t.name} ${t.ids.length}`).join(', ')}), prefill ${prefill}, α ${alpha}, cap ${cap}, r ${r} (p = ${p} of ${d}), denseLayers ${denseLayers}, skew ${values.skew}, columns ${values['column-rule']} from the first ${columnTokens} tokens, speculation query ${values.source}\n`);
console.log('| layer | head | fetch | recall infinigen | recall oracle (same n) | gap | recall spec. query, full width | recall true query, partial cols | Spearman spec. full | Spearman spec. partial | energy on C: q | q_spec | k |');
console.log('|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
const perLayer = [];
for (let l = denseLayers; l < layers; l++) {
  const rows = acc.filter((f) => f.layer === l && f.steps > 0);
  if (rows.length === 0) continue;
  for (const f of rows) {
    const s = f.steps, m = Math.max(1, f.sampled);
    console.log(`| ${l} | ${f.head} | ${pct(f.fetch / s)}% | ${pct(f.recall.infinigen / s)}% | ${pct(f.recall.oracle / s)}% | ${pct((f.recall.oracle - f.recall.infinigen) / s)} | ${pct(f.recall.specFull / s)}% | ${pct(f.recall.truePartial / s)}% | ${(f.spearman.full / m).toFixed(3)} | ${(f.spearman.partial / m).toFixed(3)} | ${pct(f.energy.q / s)}% | ${pct(f.energy.qSpec / s)}% | ${pct(f.energy.k / s)}% |`);
  }
  const mean = (g) => rows.reduce((a, f) => a + g(f) / f.steps, 0) / rows.length;
  const row = { layer: l, fetch: mean((f) => f.fetch), infinigen: mean((f) => f.recall.infinigen), oracle: mean((f) => f.recall.oracle), specFull: mean((f) => f.recall.specFull), truePartial: mean((f) => f.recall.truePartial), engine: engineSteps[l] > 0 ? engineRecall[l] / engineSteps[l] : undefined };
  perLayer.push(row);
}
console.log('\nPer layer (mean over query heads):\n');
console.log(`| layer | fetch | recall infinigen | oracle | gap (points) | spec. query full width | true query partial |${values.engine ? ' engine (inspect) |' : ''}`);
console.log(`|---:|---:|---:|---:|---:|---:|---:|${values.engine ? '---:|' : ''}`);
for (const x of perLayer) console.log(`| ${x.layer} | ${pct(x.fetch)}% | ${pct(x.infinigen)}% | ${pct(x.oracle)}% | ${pct(x.oracle - x.infinigen)} | ${pct(x.specFull)}% | ${pct(x.truePartial)}% |${values.engine ? ` ${x.engine === undefined ? '–' : pct(x.engine) + '%'} |` : ''}`);
if (values.json) writeFileSync(values.json, JSON.stringify({ command: process.argv.slice(2), texts: texts.map((t) => ({ name: t.name, tokens: t.ids.length })), heads: acc, perLayer }, null, 2));
