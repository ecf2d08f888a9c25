// longhand eval --model PATH --text-file F --policy P [knobs] : accuracy of a KV policy against
// 'full', teacher-forced over the text (app/engine/eval/). Prints a summary, or one JSON object.
import { readFileSync } from 'node:fs';
import { UsageError } from '../../common/errors.ts';
import { KV_TYPES } from '../../common/protocol.ts';
import { EVAL_POLICIES, runEval, type PolicyKnobs } from '../../engine/eval/run-eval.ts';
import { loadModel } from '../../engine/model/load-model.ts';
import { createTokenizer } from '../../engine/model/tokenizer/tokenizer.ts';
import type { CliIO } from '../main.ts';
import { oneOf, parseCommandArgs, positiveInteger } from '../parse-args.ts';
import { parsePolicyKnobs, POLICY_HELP, POLICY_OPTIONS } from '../policy-options.ts';

const HELP = `usage: longhand eval --model PATH --text-file F --policy ${EVAL_POLICIES.join('|')} [options]

  teacher-forced over the text's tokens: a short prefill, then one decode step per token, so a
  sparse policy selects at every position; compared with 'full' step by step.

  --model PATH          a .gguf file or a Hugging Face folder
  --text-file F         the text (tokenised with the model's tokenizer, BOS first)
  --policy P            ${EVAL_POLICIES.join(', ')}
${POLICY_HELP}
  --prefill N           tokens prefilled before the decode steps (default 8)
  --context N           tokens the caches hold (default: the text's length; longer text is cut)
  --threads N           threads for the dense work
  --kv-type T           the policy's KV rows: ${KV_TYPES.join('|')} (default fp16)
  --reference-kv-type T the reference 'full' runner's KV rows (default fp16); --kv-type int8
                        --policy full thus measures what int8 rows cost against fp16
  --generate N          also free-run N greedy tokens from the text's start under both policies
  --json                print one JSON object`;

export async function runEvalCommand(args: string[], io: CliIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(args, {
    model: { type: 'string' },
    'text-file': { type: 'string' },
    ...POLICY_OPTIONS,
    prefill: { type: 'string' },
    context: { type: 'string' },
    threads: { type: 'string' },
    'kv-type': { type: 'string' },
    'reference-kv-type': { type: 'string' },
    generate: { type: 'string' },
    json: { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  });
  if (values.help) {
    io.out(`${HELP}\n`);
    return 0;
  }
  if (positionals.length > 0) throw new UsageError(`unexpected argument '${positionals[0]}'`);
  if (!values.model) throw new UsageError('--model is required');
  if (!values['text-file']) throw new UsageError('--text-file is required');
  const policy = oneOf(values.policy, EVAL_POLICIES, '--policy');
  if (policy === undefined) throw new UsageError('--policy is required');
  const knobs: PolicyKnobs = parsePolicyKnobs(values);
  const prefillTokens = positiveInteger(values.prefill, '--prefill');
  const contextLength = positiveInteger(values.context, '--context');
  const threads = positiveInteger(values.threads, '--threads');
  const generate = positiveInteger(values.generate, '--generate');
  const kvType = oneOf(values['kv-type'], KV_TYPES, '--kv-type');
  const referenceKvType = oneOf(values['reference-kv-type'], KV_TYPES, '--reference-kv-type');

  let text: string;
  try {
    text = readFileSync(values['text-file'], 'utf8');
  } catch (error) {
    throw new UsageError(`cannot read --text-file ${values['text-file']}: ${(error as NodeJS.ErrnoException).code ?? error}`);
  }
  const model = await loadModel(values.model);
  try {
    const tokenizer = await createTokenizer(model.tokenizer);
    const ids = tokenizer.encode(text, { addSpecial: true });
    const prefill = prefillTokens ?? 8;
    if (ids.length < prefill + 2) throw new UsageError(`the text has ${ids.length} tokens; it needs at least ${prefill + 2} (--prefill ${prefill} + 2)`);
    const report = await runEval(model, ids, {
      policy,
      knobs,
      prefillTokens: prefill,
      ...(contextLength ? { contextLength } : {}),
      ...(threads ? { threads } : {}),
      ...(kvType ? { kvType } : {}),
      ...(referenceKvType ? { referenceKvType } : {}),
      ...(generate ? { generate } : {}),
    });
    if (values.json) {
      const generation = report.generation
        ? { ...report.generation, referenceText: tokenizer.decode(report.generation.reference), candidateText: tokenizer.decode(report.generation.candidate) }
        : undefined;
      io.out(`${JSON.stringify({ ...report, ...(generation ? { generation } : {}) })}\n`);
      return 0;
    }
    const a = report.accuracy;
    const knobText = Object.entries(report.knobs).map(([k, v]) => `${k} ${v}`).join(', ');
    io.out(
      `policy ${report.policy}${knobText ? ` (${knobText})` : ''} (KV ${report.kvType}) vs full (KV ${report.referenceKvType}): ${report.tokens} tokens, prefill ${report.prefillTokens}, ${a.positions} decode positions compared\n` +
        `  top-1 agreement   ${(100 * a.top1Agreement).toFixed(2)}%\n` +
        `  perplexity        ${a.perplexity.toFixed(4)} (full ${a.referencePerplexity.toFixed(4)}, ratio ${a.perplexityRatio.toFixed(4)})\n` +
        `  mean KL(full‖pol) ${a.meanKl.toFixed(5)} nats\n` +
        `  fetch ratio       ${(100 * a.fetchRatio).toFixed(1)}% (mean over sparse layers and steps)\n` +
        `  bytes per token   ${a.bytesPerToken.toFixed(0)} (K+V rows moved, all layers)\n`,
    );
    const g = report.generation;
    if (g) {
      io.out(`  free run (${g.tokens} greedy tokens): ${g.firstDivergence === null ? 'no divergence' : `first divergence at generated token ${g.firstDivergence}`}\n`);
    }
    io.err(`[eval] ${(report.ms / 1000).toFixed(1)} s\n`);
    return 0;
  } finally {
    model.close();
  }
}
