#!/usr/bin/env node
// The long seeded mutation-fuzzing run over every TypeScript reader of untrusted model files:
// GGUF, safetensors, a safetensors index, config.json, tokenizer.json and chat templates. The
// targets and mutators are the ones the vitest suites use (test/support/fuzz/), run for longer.
// Per reader it prints: executions; outcome classes (typed error code, and for tokenizer.json and
// templates the kind of problem or the render limit); corpus size (the seed inputs plus each
// mutant whose outcome class was new — a mutation fuzzer without coverage keeps those as parents
// for stacked mutations); crashes (anything thrown that is not the reader's typed error); hangs
// (cases slower than --hang-ms; the readers are synchronous, so a case is timed, not interrupted);
// and the slowest case with the seed that replays it.
// Usage: nice -n 10 node --import tsx bench/fuzz-readers.mjs [--seconds 120] [--seed 1]
//        [--readers gguf,safetensors,index,config,tokenizer,template] [--hang-ms 2000] [--json FILE]
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { formatReport, fuzz } from '../test/support/fuzz/core.ts';
import { chatTemplateTarget } from '../test/support/fuzz/chat-template.ts';
import { configJsonTarget, ggufTarget, safetensorsIndexTarget, safetensorsTarget } from '../test/support/fuzz/model-files.ts';
import { tokenizerJsonTarget } from '../test/support/fuzz/tokenizer-json.ts';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '120' },
    seed: { type: 'string', default: '1' },
    readers: { type: 'string', default: 'gguf,safetensors,index,config,tokenizer,template' },
    'hang-ms': { type: 'string', default: '2000' },
    json: { type: 'string' },
  },
});
const TARGETS = { gguf: ggufTarget, safetensors: safetensorsTarget, index: safetensorsIndexTarget(), config: configJsonTarget, tokenizer: tokenizerJsonTarget, template: chatTemplateTarget };
const seconds = Number(values.seconds);
const seed = Number(values.seed);
const hangMs = Number(values['hang-ms']);
if (!(seconds > 0) || !Number.isInteger(seed)) throw new Error('--seconds must be > 0 and --seed an integer');

const reports = [];
for (const name of values.readers.split(',')) {
  const target = TARGETS[name];
  if (!target) throw new Error(`unknown reader ${name} (${Object.keys(TARGETS).join(', ')})`);
  const report = fuzz(target, { seed, seconds, hangMs, stopOnCrash: false });
  console.log(formatReport(report));
  reports.push(report);
}
console.log(`\nreader               executions  classes  corpus  crashes  hangs  slowest ms`);
for (const r of reports) {
  console.log(`${r.target.padEnd(20)} ${String(r.executions).padStart(10)}  ${String(r.outcomes.size).padStart(7)}  ${String(r.corpus).padStart(6)}  ${String(r.crashes.length).padStart(7)}  ${String(r.hangs.length).padStart(5)}  ${r.slowest.ms.toFixed(1).padStart(10)}`);
}
if (values.json) {
  writeFileSync(values.json, JSON.stringify(reports.map((r) => ({ ...r, outcomes: Object.fromEntries(r.outcomes), crashes: r.crashes.map((c) => ({ seed: c.seed, what: c.what, message: c.message })) })), null, 2));
}
process.exitCode = reports.some((r) => r.crashes.length > 0 || r.hangs.length > 0) ? 1 : 0;
