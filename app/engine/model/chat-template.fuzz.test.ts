// Seeded mutation fuzzing of chat templates (test/support/fuzz/chat-template.ts) and the render
// limits that make hostile templates stop (chat-template-guard.ts). Every case must render or throw
// LonghandError CHAT_TEMPLATE_INVALID, and finish in time. The long run is bench/fuzz-readers.mjs.
import { Template } from '@huggingface/jinja';
import { describe, expect, it } from 'vitest';
import { LonghandError } from '../../common/errors.ts';
import { formatReport, fuzz } from '../../../test/support/fuzz/core.ts';
import { chatTemplateTarget, FUZZ_LIMITS, FUZZ_MESSAGES, HOSTILE_SNIPPETS } from '../../../test/support/fuzz/chat-template.ts';
import { ChatTemplate } from './chat-template.ts';

/** The fuzz budgets, but a time limit long enough that a loaded machine still hits the others first. */
const LIMITS = { ...FUZZ_LIMITS, maxMs: 60_000 };

function outcome(text: string): { code: string; limit?: string; output?: string } {
  try {
    return { code: 'ok', output: new ChatTemplate(text).render(FUZZ_MESSAGES, { limits: LIMITS }) };
  } catch (error) {
    if (!(error instanceof LonghandError)) throw error;
    return { code: error.code, limit: (error.details as { limit?: string }).limit };
  }
}

describe('chat template limits', () => {
  it.each([
    ['range(10**9)', '{% for x in range(10**9) %}x{% endfor %}', 'maxItems'],
    ['nested loops', '{% for x in range(100000) %}{% for y in range(100000) %}{{ x }}{% endfor %}{% endfor %}', 'maxSteps'],
    ['infinite recursion', '{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}', 'maxDepth'],
    ['exponential recursion', '{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(40) }}', 'maxSteps'],
    ['string doubling', "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}", 'maxChars'],
    ['list doubling', '{% set ns = namespace(a=[1, 2]) %}{% for i in range(64) %}{% set ns.a = ns.a + ns.a %}{% endfor %}', 'maxItems'],
    ['huge indent', "{{ 'a\\nb' | indent(1000000000) }}", 'maxIndent'],
    ['huge tojson indent', '{{ messages | tojson(indent=100000000) }}', 'maxIndent'],
  ])('%s stops with CHAT_TEMPLATE_INVALID naming the limit', (_name, text, limit) => {
    const started = performance.now();
    const result = outcome(text);
    expect(result).toEqual({ code: 'CHAT_TEMPLATE_INVALID', limit });
    expect(performance.now() - started).toBeLessThan(10_000); // a hang check, not a benchmark
  });

  it('the message names the limit and the numbers', () => {
    expect(() => new ChatTemplate('{% for x in range(10**9) %}{% endfor %}').render(FUZZ_MESSAGES)).toThrow(/range\(\) too long, in items \(1000000000 > \d+\)/);
  });

  it('a time limit stops a render that stays under the step limit', () => {
    const text = '{% for x in range(100000) %}{% for y in range(100000) %}{{ x }}{% endfor %}{% endfor %}';
    expect(() => new ChatTemplate(text).render(FUZZ_MESSAGES, { limits: { maxSteps: 1e12, maxMs: 200 } })).toThrow(/took too long/);
  });

  it('renders real templates exactly as @huggingface/jinja does, with room to spare for long conversations', () => {
    const variables = { messages: FUZZ_MESSAGES, add_generation_prompt: true, bos_token: '<s>', eos_token: '</s>', unk_token: '', pad_token: '', tools: null, documents: null };
    for (const seed of chatTemplateTarget.seeds()) {
      expect(new ChatTemplate(seed.input, { bos: '<s>', eos: '</s>' }).render(FUZZ_MESSAGES), seed.name).toBe(new Template(seed.input).render(variables));
    }
    const long = Array.from({ length: 2_000 }, (_, i) => ({ role: i % 2 === 0 ? ('user' as const) : ('assistant' as const), content: `turn ${i} `.repeat(50) }));
    for (const seed of chatTemplateTarget.seeds()) expect(new ChatTemplate(seed.input).render(long).length, seed.name).toBeGreaterThan(900_000);
  });

  it('sandbox escapes do not reach JavaScript or Python internals', () => {
    for (const snippet of HOSTILE_SNIPPETS.filter((s) => /constructor|__|proto|cycler|lipsum|self\.|config|import|include|extends/.test(s))) {
      const result = outcome(snippet);
      expect(result.code, snippet).toMatch(/^(ok|CHAT_TEMPLATE_INVALID)$/);
      if (result.output !== undefined) expect(result.output, snippet).not.toMatch(/native code|function|process|\[object|uid=/);
    }
  });
});

describe('mutated chat templates', () => {
  it('render or throw CHAT_TEMPLATE_INVALID, each within the time limit (800 seeded cases)', () => {
    const report = fuzz(chatTemplateTarget, { seed: 20_240_601, cases: 800, hangMs: 5_000, stopOnCrash: true });
    console.log(formatReport(report));
    expect(report.executions).toBe(800);
    expect(report.crashes).toEqual([]);
    expect(report.hangs).toEqual([]);
    // the mutators reach rendering and every limit, not only the parser
    for (const expected of ['ok', 'CHAT_TEMPLATE_INVALID: parse', 'CHAT_TEMPLATE_INVALID: render', 'CHAT_TEMPLATE_INVALID: render limit maxSteps', 'CHAT_TEMPLATE_INVALID: render limit maxItems']) {
      expect(report.outcomes.get(expected) ?? 0, expected).toBeGreaterThan(0);
    }
  });
});
