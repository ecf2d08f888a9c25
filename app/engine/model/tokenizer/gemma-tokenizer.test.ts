// Gemma's 262 144-piece SentencePiece vocabulary (the real one, test/fixtures/families/gemma-vocab.ts,
// written into a GGUF as the converter writes it) tokenized by our SPM tokenizer and by llama.cpp
// (node-llama-cpp) id for id: Unicode, code, digits, runs of spaces and newlines (Gemma has
// user-defined tokens for both), HTML tags (user-defined), and the special tokens in text with and
// without special-token parsing. Also the end-of-turn stops and the chat template's rendering.
import { existsSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { gemmaVocab } from '../../../../test/fixtures/families/gemma-vocab.ts';
import { writeGemmaGguf, GEMMA3_FIXTURE } from '../../../../test/fixtures/families/gemma.ts';
import { loadGgufModel } from '../gguf/gguf-model.ts';
import { createGgufTokenizer, type Tokenizer } from './tokenizer.ts';

const dir = join(tmpdir(), 'longhand-gemma-fixtures');
mkdirSync(dir, { recursive: true });
// one small layer: only the vocabulary matters here
const path = join(dir, 'gemma3-tokenizer-only-v1.gguf');

/** Handwritten strings, then seeded random mixes of the awkward parts: at least 500 in all. */
function crossCheckStrings(): string[] {
  const fixed = [
    '', ' ', '  ', '   ', '    ', '        ', 'a', 'Hello', ' Hello', 'Hello ', 'Hello  world', 'Hello   world    !',
    '\n', '\n\n', '\n\n\n', '\n\n\n\n\n\n\n\n', 'a\nb', 'a\n\nb', 'a\n \nb', ' \n ', '\t', '\t\t', 'tab\tseparated', 'line\r\nbreak', '\r',
    '0', '7', '42', '123', '1234', '12345678901234567890', '3.14159', '1,000,000', '2024-05-01', '-42', '0x1F', '1e-9', '١٢٣', '½',
    'function add(a, b) {\n  return a + b;\n}', 'def f(x):\n    return x ** 2\n', '    indented', 'if (x) { y(); }', '#include <stdio.h>',
    'SELECT * FROM t WHERE id = 1;', 'for i in range(10):\n\tprint(i)', '<div class="x">hi</div>', '<table><tr><td>1</td></tr></table>',
    '<b>bold</b> and <i>it</i>', '**markdown** _x_ `code`', '```python\nprint(1)\n```', 'a->b => c != d == e <= f', 'x_y_z', 'camelCaseName',
    "it's", "don't", "I'm", 'CAPS LOCK', 'MiXeD cAsE', '!?.,;:', '...', '---', '***', '((()))', '[x]', '{y}', '<>', '@#$%^&*', '~`|\\/',
    'café', 'naïve', 'Straße', 'Ωμέγα', 'Привет мир', 'שלום', 'مرحبا بالعالم', 'नमस्ते', 'สวัสดี', '世界', '你好，世界', 'こんにちは', '한국어',
    '😀', '😀😀', 'smile 😀 face', '👍🏽', '👨‍👩‍👧', '🇫🇷', '∑∫√∞', '€£¥', '\u00a0nbsp', 'zero\u200bwidth', 'é (e\u0301)', '\u2581 lower block', '▁▁',
    '\u{10FFFF}', '\u{1F9A0}', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢', 'ﬁ ligature',
    '<bos>', '<eos>', '<pad>', '<unk>', '<mask>', '<start_of_turn>', '<end_of_turn>', '<start_of_turn>user\nHi<end_of_turn>\n',
    '<start_of_turn>model\n', 'x<end_of_turn>y', '<start_of_image>', '<unused0>', '<unused99>', '[multimodal]', '<<bos>>', '<bos', 'eos>',
    '<0x41>', '<0x0A>',
  ];
  const parts = [
    'the', ' ', '  ', '   ', 'model', 'Gemma', '.', ',', '!', '?', '\n', '\n\n', '\n\n\n', '\t', '7', '42', '2024', "'s", '"', 'def ', '()', '{', '}',
    '😀', '🐉', '世', '界', 'é', 'ß', 'Ж', 'ü', '<bos>', '<eos>', '<start_of_turn>', '<end_of_turn>', '<unused5>', '<b>', '</td>', '▁', '-', 'X', 'zz',
  ];
  let seed = 30303;
  const random = (n: number): number => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return (seed >>> 8) % n;
  };
  const mixed: string[] = [];
  for (let i = 0; i < 400; i++) {
    let text = '';
    const count = 1 + random(14);
    for (let j = 0; j < count; j++) text += parts[random(parts.length)];
    mixed.push(text);
  }
  return [...fixed, ...mixed];
}

describe('Gemma vocabulary against llama.cpp', () => {
  let tokenizer: Tokenizer;
  let model: { tokenize(text: string, special?: boolean): readonly number[]; detokenize(ids: readonly number[], special?: boolean): string; dispose(): Promise<void> };
  beforeAll(async () => {
    if (!existsSync(path)) writeGemmaGguf(path, { ...GEMMA3_FIXTURE, dim: 64, layers: 1, heads: 1, kvHeads: 1, ffn: 64 }, 'F32');
    const loaded = loadGgufModel(path);
    tokenizer = createGgufTokenizer((loaded.tokenizer as { metadata: ReadonlyMap<string, unknown> }).metadata);
    loaded.close();
    const { getLlama } = await import('node-llama-cpp');
    const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error' as never });
    model = (await llama.loadModel({ modelPath: path })) as unknown as typeof model;
  }, 120_000);
  afterAll(async () => {
    await model?.dispose();
  });

  test('special tokens, BOS and the end-of-turn stops', () => {
    const v = gemmaVocab();
    expect(tokenizer.vocabSize).toBe(262144);
    expect(tokenizer.bos).toBe(v.bos);
    expect(tokenizer.addBos).toBe(true);
    expect(tokenizer.encode('Hi')[0]).toBe(v.bos);
    // <end_of_turn> (106, the file's EOS) ends generation
    expect(tokenizer.eosIds).toContain(v.endOfTurn);
    expect(tokenizer.isEndOfGeneration(v.endOfTurn)).toBe(true);
    expect(tokenizer.isSpecial(v.startOfTurn)).toBe(true);
  });

  test('same ids as llama.cpp over 500+ strings, with and without special-token parsing', () => {
    const strings = crossCheckStrings();
    expect(strings.length).toBeGreaterThanOrEqual(500);
    const mismatches: string[] = [];
    let compared = 0;
    for (const text of strings) {
      for (const parseSpecial of [false, true]) {
        compared++;
        const ours = tokenizer.encode(text, { addSpecial: false, parseSpecial });
        const theirs = [...model.tokenize(text, parseSpecial)].map(Number);
        if (JSON.stringify(ours) !== JSON.stringify(theirs)) mismatches.push(`${JSON.stringify(text)} parseSpecial=${parseSpecial}: ours ${JSON.stringify(ours)} llama.cpp ${JSON.stringify(theirs)}`);
      }
    }
    console.log(`Gemma vocabulary, llama.cpp tokenize cross-check: ${strings.length} strings, ${compared} comparisons, ${mismatches.length} mismatches`);
    expect(mismatches.slice(0, 20)).toEqual([]);
  });

  test('same text as llama.cpp detokenize', () => {
    const mismatches: string[] = [];
    const strings = crossCheckStrings().filter((text) => text !== '');
    for (const text of strings) {
      const ids = tokenizer.encode(text, { addSpecial: false });
      const theirs = model.detokenize(ids);
      if (tokenizer.decode(ids) !== theirs) mismatches.push(`${JSON.stringify(text)}: ours ${JSON.stringify(tokenizer.decode(ids))} llama.cpp ${JSON.stringify(theirs)}`);
    }
    console.log(`Gemma vocabulary, llama.cpp detokenize cross-check: ${strings.length} strings, ${mismatches.length} mismatches`);
    expect(mismatches.slice(0, 20)).toEqual([]);
  });
});
