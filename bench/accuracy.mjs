// Accuracy of the KV policies against 'full' (ARCHITECTURE.md §8): stories260K by default, or
// kjv-llama-hd64 (head dim 64; --model ../shared/models/kjv-llama-hd64.gguf). Not part of `npm test`.
//
//   node --import tsx bench/accuracy.mjs [--model PATH] [--ratios 0.05,0.1,0.2] [--alphas 2,3,4,5,6,8]
//        [--partial 0.3] [--ig-caps 0.5] [--dense 2] [--policies infinigen,h2o,streaming,quest,oracle,snapkv]
//        [--generated 8] [--tokens 450] [--prefill 8] [--context 512] [--texts stories|kjv|none] [--inspect] [--json FILE]
//
// Texts: `--generated` texts the model writes itself from BOS (temperature 0.8, seeds 1001, 1002, …;
// EOS suppressed; `--tokens` tokens each; not stored), plus held-out texts cut to the context:
// `--texts stories` the four children's stories below (default for stories260K), `--texts kjv` the
// passages of ../shared/models/kjv-eval/*.txt (books the KJV model never saw; default for a model
// whose file name starts with "kjv"; their defaults are --tokens 900 --context 1024, the model's
// training window). Each text is teacher-forced: `--prefill` tokens of prefill, then one decode
// step per token, so every compared prediction is made by a (sparse) decode step. For each fetch
// ratio: InfiniGen at each alpha with that ratio as its cap, and h2o / streaming / quest / oracle
// keeping ⌊ratio·N⌋ tokens per KV head at context N (the same budget); snapkv keeps ⌊ratio·P⌋ of the
// P prompt tokens (its observation window of 32 included, shrunk to the budget when larger) and
// attends every token after the prompt, so with the default 8-token prefill it keeps nearly
// everything: `--prefill 256` compares it on a long prompt. `--dense 0,1,2`: the grid is repeated
// for each denseLayers value, the same for every policy of a block. `--partial 0.3,0.2`: InfiniGen's
// r (partial columns ⌊r·d⌋). `--ig-caps 0.5`: InfiniGen also with these caps (α alone then sets the
// fetch ratio below the cap, per layer and step). `--inspect`: InfiniGen also reports per-layer attention recall (the
// share of the true softmax mass its attended set covers) and fetch ratio.
// Metrics pooled over all positions of all texts: top-1 agreement with full, perplexity ratio
// exp(mean(NLL_policy − NLL_full)), mean KL(full ‖ policy), and the average fetch ratio: per decode
// step the mean over the SPARSE layers (ℓ >= denseLayers) of selected/N per KV head, then the mean
// over all steps of all texts (the dense layers, which read everything, are not in it).
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { compareWithReference, referenceLogits, teacherForce } from '../app/engine/eval/accuracy.ts';
import { runnerPolicyOptions } from '../app/engine/eval/run-eval.ts';
import { createModelRunner } from '../app/engine/forward/model-runner.ts';
import { createSampler, resolveSamplingParams } from '../app/engine/generate/sampler.ts';
import { loadModel } from '../app/engine/model/load-model.ts';
import { createTokenizer } from '../app/engine/model/tokenizer/tokenizer.ts';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

const STORIES = [
  `Once upon a time, in a small house near a big green hill, there lived a little girl named Mia. Mia had a red ball, a brown dog called Bongo, and a grandma who baked the best cookies in the whole town. Every morning Mia and Bongo ran up the hill to look at the sky. One day the sky was grey and the wind was loud. "Bongo, I think it will rain," said Mia. Bongo wagged his tail and barked at a cloud. Then Mia saw something shiny in the grass. It was a tiny blue key. "Where does this key go?" she asked. She looked under a rock, and she looked in a hole, but she did not find a door. Mia put the key in her pocket and ran home with Bongo. Grandma was in the kitchen. The house smelled warm and sweet. "Grandma, look what I found!" said Mia. Grandma smiled and wiped her hands. "That key is very old," she said. "I had a little box when I was a girl, and I lost its key on the hill." Grandma went to her room and came back with a small wooden box. It had a blue lock on the front. Mia put the key in the lock and turned it. Click! The box opened. Inside there was a picture of a girl with a dog, a shiny stone, and a note. The note said, "Be kind, be brave, and share your cookies." Mia laughed. "That is you, Grandma!" Grandma nodded and gave Mia a big hug. Then they shared the cookies with Bongo, and outside the rain began to fall softly on the hill. Mia felt happy and warm, and she kept the little key on a string around her neck.`,
  `Tom was a little boy who loved boats. He had a toy boat that was yellow and white, and he played with it in the bath every night. One sunny day, Tom's dad said, "Let's go to the lake and sail your boat." Tom jumped up and down. "Yes, yes, yes!" he shouted. They walked to the lake with a basket of apples and a blanket. The water was blue and calm, and little ducks were swimming near the shore. Tom put his boat on the water and gave it a gentle push. The boat moved slowly away. "Go, boat, go!" said Tom. But then a big wind came. The boat went faster and faster, far away from Tom. Tom was sad. "My boat! Come back!" he cried. A duck swam over to the boat. The duck pushed the boat with its beak, and the boat turned around. The wind helped, too. Slowly, slowly, the boat came back to the shore. Tom picked up his boat and hugged it. "Thank you, duck!" he said. The duck said, "Quack!" and swam in a circle. Tom's dad laughed. "You made a new friend today," he said. Tom gave the duck a small piece of apple. The duck ate it and quacked again. Then Tom and his dad sat on the blanket and ate the rest of the apples. They watched the ducks and the clouds and the little waves. When the sun went down, they walked home. That night, in the bath, Tom sailed his boat again, and he told it the story of the brave duck who saved the day. He fell asleep with a smile on his face.`,
  `There was a small bird named Pip who lived in a tall tree in the park. Pip could sing, but he could not fly very well. His wings were small, and he was a little bit scared. The other birds flew high over the trees and the pond. "Come on, Pip!" they called. But Pip stayed on his branch and watched. One day a girl named Lucy came to the park with her mom. Lucy sat under the tall tree and opened a book. She read the story out loud. It was about a little bird who wanted to touch the moon. Pip listened and listened. The bird in the story was scared too, but it tried every day. "I can try, too," said Pip. He stood at the end of the branch. He flapped his small wings. He jumped! For a moment he fell, and he was very scared. Then his wings caught the air, and he went up, up, up. He flew over Lucy and her book. Lucy looked up and clapped her hands. "Mom, look! A little bird is flying!" she said. Pip flew around the tree once, and then twice. He landed on a low branch next to Lucy. He was tired, but he was so happy. He sang the best song he knew. Lucy smiled and said, "You are a brave bird." After that day, Pip flew a little every morning. Soon he could fly over the pond and back. The other birds were proud of him, and Lucy came to the park every day to read her book under the tall tree and listen to Pip sing.`,
  `Sam and Lily were best friends. They lived next to each other, and there was a little gate between their gardens. One day, Sam had an idea. "Let's build a big castle with boxes!" he said. Lily liked the idea very much. They found boxes in the garage, big boxes and small boxes, and a roll of tape. They worked all morning. They made a tall tower and a wide wall and a door that could open and close. Lily drew windows with a blue pen, and Sam made a flag from an old red shirt. When the castle was done, it was bigger than both of them. "We are the king and queen of the castle!" said Lily. Then a cat came into the garden. It was a fat orange cat with a long tail. The cat walked into the castle and sat down in the middle. "Hey, that is our castle!" said Sam. The cat did not move. It closed its eyes and began to purr. Lily laughed. "Maybe the cat is the king now," she said. Sam thought about it and then he laughed too. "Okay, cat. You can be the king. We will be your friends." They gave the cat a little bowl of milk and a soft blanket. The cat purred louder. Then the sky turned dark, and it began to rain. The boxes got wet and soft, and the tower fell down with a big splash. Sam and Lily ran inside, and the cat ran with them. They sat by the window and watched the rain. "Tomorrow we can build a new castle," said Lily. "A castle with a roof," said Sam, and the cat purred as if it agreed.`,
];

const { values } = parseArgs({
  options: {
    model: { type: 'string', default: join(ROOT, '..', 'shared', 'models', 'stories260K.gguf') },
    ratios: { type: 'string', default: '0.05,0.1,0.2' },
    alphas: { type: 'string', default: '2,3,4,5,6,8' },
    partial: { type: 'string', default: '0.3' },
    'ig-caps': { type: 'string', default: '' },
    dense: { type: 'string', default: '2' },
    texts: { type: 'string' },
    inspect: { type: 'boolean', default: false },
    policies: { type: 'string', default: 'infinigen,h2o,streaming,quest,oracle,snapkv' },
    generated: { type: 'string', default: '8' },
    tokens: { type: 'string' },
    prefill: { type: 'string', default: '8' },
    context: { type: 'string' },
    json: { type: 'string' },
  },
});
const list = (s) => s.split(',').map(Number);
const ratios = list(values.ratios);
const alphas = list(values.alphas);
const policies = values.policies.split(',');
const partials = list(values.partial);
// extra InfiniGen caps: α alone decides the fetch below them, so the average lands where α puts it
const igCaps = values['ig-caps'] ? list(values['ig-caps']) : [];
const denses = list(values.dense);
const prefillTokens = Number(values.prefill);
const kjv = basename(values.model).startsWith('kjv');
const textSet = values.texts ?? (kjv ? 'kjv' : 'stories');
const tokensPerText = Number(values.tokens ?? (kjv ? 900 : 450));
const KJV_EVAL = join(dirname(values.model), 'kjv-eval');

console.log(`command: node --import tsx bench/accuracy.mjs ${process.argv.slice(2).join(' ')}`.trim());
console.log(`machine: ${cpus().length} × ${cpus()[0]?.model ?? '?'}, load average ${loadavg().map((x) => x.toFixed(2)).join(' ')} (at start)`);
const t0 = performance.now();
const model = await loadModel(values.model);
const tokenizer = await createTokenizer(model.tokenizer);
// stories260K was trained on 512-token sequences, the KJV model on 1,024-token windows
const context = Math.min(Number(values.context ?? (kjv ? 1024 : 512)), model.hyper.contextLength);
const cacheDir = mkdtempSync(join(tmpdir(), 'longhand-acc-'));

// ---------------------------------------------------------------- texts
const texts = [];
const full = await createModelRunner(model, { contextLength: context });
for (let i = 0; i < Number(values.generated); i++) {
  const sampler = createSampler(resolveSamplingParams({ temperature: 0.8, seed: 1001 + i }), full.vocabSize);
  full.reset();
  const ids = [tokenizer.bos ?? 1];
  let logits = await full.prefill(ids);
  while (ids.length < Math.min(tokensPerText, context)) {
    for (const e of tokenizer.eosIds) logits[e] = -Infinity;
    const id = sampler.sample(logits, ids);
    ids.push(id);
    logits = await full.decode(id);
  }
  texts.push({ name: `generated seed ${1001 + i}`, ids });
}
if (textSet === 'stories') for (const [i, s] of STORIES.entries()) texts.push({ name: `story ${i + 1}`, ids: tokenizer.encode(s, { addSpecial: true }).slice(0, context) });
if (textSet === 'kjv') {
  for (const f of readdirSync(KJV_EVAL).filter((f) => f.endsWith('.txt')).sort()) {
    texts.push({ name: f.replace(/\.txt$/, ''), ids: tokenizer.encode(readFileSync(join(KJV_EVAL, f), 'utf8'), { addSpecial: true }).slice(0, context) });
  }
}
console.log(`texts: ${texts.map((t) => `${t.name} (${t.ids.length})`).join(', ')}`);
const refs = [];
for (const t of texts) refs.push(await referenceLogits(full, t.ids, { prefillTokens }));
await full.dispose();

// ---------------------------------------------------------------- grid
const settings = [];
for (const dense of denses) {
  for (const ratio of ratios) {
    for (const p of policies) {
      if (p === 'infinigen') {
        for (const r of partials) for (const alpha of alphas) settings.push({ policy: p, dense, ratio, label: `α ${alpha}, r ${r}, cap ${ratio}`, knobs: { alpha, partialRatio: r, fetchCap: ratio, denseLayers: dense, cacheDir } });
      } else if (p === 'snapkv') settings.push({ policy: p, dense, ratio, label: `prompt budget ${ratio}·P, window ≤ 32`, knobs: { fetchCap: ratio, denseLayers: dense } });
      else settings.push({ policy: p, dense, ratio, label: `budget ${ratio}·N`, knobs: { fetchCap: ratio, denseLayers: dense } });
    }
  }
  if (policies.includes('infinigen')) {
    for (const c of igCaps) for (const r of partials) for (const alpha of alphas) settings.push({ policy: 'infinigen', dense, ratio: c, label: `α ${alpha}, r ${r}, cap ${c}`, knobs: { alpha, partialRatio: r, fetchCap: c, denseLayers: dense, cacheDir } });
  }
}
const rows = [];
for (const s of settings) {
  const options = runnerPolicyOptions(s.policy, s.knobs);
  if (values.inspect && options.infinigen) options.infinigen.inspect = true;
  const runner = await createModelRunner(model, { contextLength: context, ...options });
  let n = 0, agree = 0, logRatio = 0, kl = 0, fetch = 0;
  const L = model.hyper.layers;
  const layerRecall = new Float64Array(L), layerFetch = new Float64Array(L), layerSteps = new Float64Array(L);
  for (const [i, t] of texts.entries()) {
    const r = await compareWithReference(runner, refs[i], t.ids, { hyper: model.hyper, prefillTokens });
    n += r.positions;
    agree += r.top1Agreement * r.positions;
    logRatio += Math.log(r.perplexityRatio) * r.positions;
    kl += r.meanKl * r.positions;
    fetch += r.fetchRatio * r.positions;
    if (values.inspect && s.policy === 'infinigen') {
      // a second teacher-forced pass just for the per-layer figures (same steps, same selections)
      await teacherForce(runner, t.ids, { prefillTokens }, (_i, _logits, stats) => {
        for (const l of stats?.layers ?? []) {
          if (l.dense) continue;
          layerSteps[l.layer] += 1;
          layerFetch[l.layer] += l.fetchRatio;
          layerRecall[l.layer] += l.recall ?? NaN;
        }
      });
    }
  }
  await runner.dispose();
  const row = { policy: s.policy, dense: s.dense, setting: s.label, ratio: s.ratio, positions: n, top1: agree / n, pplRatio: Math.exp(logRatio / n), kl: kl / n, fetch: fetch / n };
  if (values.inspect && s.policy === 'infinigen') row.layers = [...layerSteps].map((c, l) => (c > 0 ? { layer: l, recall: layerRecall[l] / c, fetch: layerFetch[l] / c } : null)).filter(Boolean);
  rows.push(row);
  const perLayer = row.layers ? `  recall/fetch per layer ${row.layers.map((x) => `${x.layer}:${(100 * x.recall).toFixed(1)}/${(100 * x.fetch).toFixed(1)}`).join(' ')}` : '';
  process.stderr.write(`dense ${row.dense} ${row.policy} ${row.setting}: ${(100 * row.top1).toFixed(1)}% ${row.pplRatio.toFixed(3)} ${row.kl.toFixed(4)} ${(100 * row.fetch).toFixed(1)}%${perLayer}\n`);
}
rmSync(cacheDir, { recursive: true, force: true });
model.close();

console.log(`\n${texts.length} texts, ${rows[0]?.positions ?? 0} teacher-forced decode positions per setting (prefill ${prefillTokens}), context ${context}; avg fetch ratio = mean over steps of the mean over sparse layers\n`);
console.log('| denseLayers | policy | setting | top-1 agreement | perplexity ratio | mean KL (nats) | avg fetch ratio |');
console.log('|---:|---|---|---:|---:|---:|---:|');
for (const r of rows) console.log(`| ${r.dense} | ${r.policy} | ${r.setting} | ${(100 * r.top1).toFixed(1)}% | ${r.pplRatio.toFixed(3)} | ${r.kl.toFixed(4)} | ${(100 * r.fetch).toFixed(1)}% |`);
if (values.inspect) {
  console.log('\nInfiniGen per sparse layer: attention recall / fetch ratio (the engine\'s inspect figures)\n');
  for (const r of rows) if (r.layers) console.log(`| ${r.dense} | ${r.setting} | ${r.layers.map((x) => `ℓ${x.layer} ${(100 * x.recall).toFixed(1)}% / ${(100 * x.fetch).toFixed(1)}%`).join(' | ')} |`);
}
console.log(`\nload average ${loadavg().map((x) => x.toFixed(2)).join(' ')} (at end), ${((performance.now() - t0) / 1000).toFixed(0)} s`);
if (values.json) writeFileSync(values.json, JSON.stringify({ command: process.argv.slice(2), context, prefillTokens, texts: texts.map((t) => ({ name: t.name, tokens: t.ids.length })), rows }, null, 2));
