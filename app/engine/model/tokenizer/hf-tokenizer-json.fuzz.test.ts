// Seeded mutation fuzzing of tokenizer.json (test/support/fuzz/tokenizer-json.ts): byte-level and
// structural mutations of real BPE, WordPiece and Unigram files. Every case must load and encode,
// or throw LonghandError; never another exception, never a hang. The long run is
// bench/fuzz-readers.mjs.
import { describe, expect, it } from 'vitest';
import { formatReport, fuzz } from '../../../../test/support/fuzz/core.ts';
import { tokenizerJsonTarget } from '../../../../test/support/fuzz/tokenizer-json.ts';
import { MAX_JSON_DEPTH, MAX_VOCAB_SIZE, parseHfTokenizer } from './hf-tokenizer-json.ts';

describe('mutated tokenizer.json', () => {
  it('loads and encodes, or throws LonghandError, each within the time limit (600 seeded cases)', () => {
    const report = fuzz(tokenizerJsonTarget, { seed: 20_240_602, cases: 600, hangMs: 5_000, stopOnCrash: true });
    console.log(formatReport(report));
    expect(report.executions).toBe(600);
    expect(report.crashes).toEqual([]);
    expect(report.hangs).toEqual([]);
    expect(report.outcomes.get('ok') ?? 0).toBeGreaterThan(0);
    expect([...report.outcomes.keys()].filter((k) => k.startsWith('TOKENIZER_INVALID')).length).toBeGreaterThan(4);
  });

  it('refuses what used to hang or crawl, before the library sees it', () => {
    const [seed] = tokenizerJsonTarget.seeds();
    const json = JSON.parse(seed!.input.tokenizer) as { model: { vocab: Record<string, number> }; added_tokens: { content: string }[] };
    json.model.vocab['<unk>'] = 2 ** 31; // sized the library's id table: a hang
    const started = performance.now();
    expect(() => parseHfTokenizer(JSON.stringify(json))).toThrow(new RegExp(`has id 2147483648, not an integer in \\[0, ${MAX_VOCAB_SIZE}\\)`));
    expect(() => parseHfTokenizer('['.repeat(1_000_000))).toThrow(new RegExp(`more than ${MAX_JSON_DEPTH} levels deep`));
    json.model.vocab['<unk>'] = 0;
    json.added_tokens[0]!.content = '['.repeat(1_000_000);
    expect(() => parseHfTokenizer(JSON.stringify(json))).toThrow(/an added token is 1000000 characters long/);
    expect(performance.now() - started).toBeLessThan(1_000);
  });
});
