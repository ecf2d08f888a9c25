// Gemma 4's "gemma4" tokenizer (BPE over ▁-escaped raw UTF-8, newline runs split off, <0xXX> byte
// fallback, BOS always added: bpe.ts) against llama.cpp's (node-llama-cpp 3.21.1) id for id, on a
// GGUF with the keys Gemma4Model.set_vocab writes. The vocabulary and merges are Gemma 3's real
// 262K ones (test/fixtures/families/gemma4.ts says why): Unicode, code, digits, runs of spaces and
// newlines, special tokens in text with and without special-token parsing; decoding alike.
import { existsSync, mkdirSync, renameSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { gemmaVocab } from '../../../../test/fixtures/families/gemma-vocab.ts';
import { GEMMA4_FIXTURE, writeGemma4Gguf } from '../../../../test/fixtures/families/gemma4.ts';
import { loadGgufModel } from '../gguf/gguf-model.ts';
import { createGgufTokenizer, type Tokenizer } from './tokenizer.ts';

const dir = join(tmpdir(), 'longhand-gemma4-fixtures');
mkdirSync(dir, { recursive: true });
// the smallest model of the fixture's pattern: only the vocabulary matters here
const path = join(dir, 'gemma4-tokenizer-only-v1.gguf');

/** Handwritten strings, then seeded random mixes of the awkward parts: 500 or more in all. */
function strings(): string[] {
  const fixed = [
    '', ' ', '  ', '   ', '    ', '        ', 'a', 'Hello', ' Hello', 'Hello ', 'Hello  world', 'Hello   world    !', ' leading', 'trailing ',
    '\n', '\n\n', '\n\n\n', '\n'.repeat(40), 'a\nb', 'a\n\nb', 'a\n \nb', ' \n ', '\t', '\t\t', 'tab\tseparated', 'line\r\nbreak', '\r', '\n a',
    '0', '7', '42', '123', '1234', '12345678901234567890', '3.14159', '1,000,000', '2024-05-01', '-42', '0x1F', '1e-9', '١٢٣', '½',
    'function add(a, b) {\n  return a + b;\n}', 'def f(x):\n    return x ** 2\n', '    indented', 'if (x) { y(); }', '#include <stdio.h>',
    'SELECT * FROM t WHERE id = 1;', 'for i in range(10):\n\tprint(i)', '<div class="x">hi</div>', '<table><tr><td>1</td></tr></table>',
    "it's", "don't", "a ' b", "x ' ' y", "we 're here", "I 've", "you 'll", "it 'd", "don 't", "he 's", "I 'm", " ' ", "' ", " '", 'end .', 'a , b ? c !', 'CAPS LOCK', 'MiXeD cAsE', '!?.,;:', '...', '---', '((()))', '[x]', '{y}', '<>', '@#$%^&*', '~`|\\/',
    'café', 'naïve', 'Straße', 'Ωμέγα', 'Привет мир', 'שלום', 'مرحبا بالعالم', 'नमस्ते', 'สวัสดี', '世界', '你好，世界', 'こんにちは', '한국어',
    '😀', '😀😀', 'smile 😀 face', '👍🏽', '👨‍👩‍👧', '🇫🇷', '∑∫√∞', '€£¥', '\u00a0nbsp', 'zero\u200bwidth', 'é (e\u0301)', '\u2581 lower block', '▁▁', '▁ ▁',
    '\u{10FFFF}', '\u{1F9A0}', '\u{E000}', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢', 'ﬁ ligature', '\u0000', '\u0007bell',
    '<bos>', '<eos>', '<pad>', '<unk>', '<start_of_turn>', '<end_of_turn>', '<start_of_turn>user\nHi<end_of_turn>\n', 'x<end_of_turn>y',
    '<unused0>', '<<bos>>', '<bos', '<0x41>', '<0x0A>',
  ];
  const parts = [
    'the', ' ', '  ', '   ', 'model', 'Gemma', '.', ',', '!', '?', '\n', '\n\n', '\n\n\n', '\t', '7', '42', '2024', "'s", '"', 'def ', '()', '{', '}',
    '😀', '🐉', '世', '界', 'é', 'ß', 'Ж', '\u{E001}', '<bos>', '<eos>', '<start_of_turn>', '<end_of_turn>', '<b>', '▁', '-', 'X', 'zz',
  ];
  let seed = 40404;
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

describe('the gemma4 tokenizer against llama.cpp', () => {
  let tokenizer: Tokenizer;
  let model: { tokenize(text: string, special?: boolean): readonly number[]; detokenize(ids: readonly number[], special?: boolean): string; dispose(): Promise<void> };
  beforeAll(async () => {
    if (!existsSync(path)) {
      const tiny = { ...GEMMA4_FIXTURE, dim: 64, ffn: 64, headDimWindow: 16, headDimGlobal: 32, window: [true, false, true, false], sharedKvLayers: 0, kEqV: [] };
      writeGemma4Gguf(`${path}.part`, tiny, 'F32', 'gemma4');
      renameSync(`${path}.part`, path);
    }
    const loaded = loadGgufModel(path);
    tokenizer = createGgufTokenizer((loaded.tokenizer as { metadata: ReadonlyMap<string, unknown> }).metadata);
    loaded.close();
    const { getLlama } = await import('node-llama-cpp');
    const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error' as never });
    model = (await llama.loadModel({ modelPath: path, vocabOnly: true })) as unknown as typeof model;
  }, 120_000);
  afterAll(async () => {
    await model?.dispose();
  });

  test('BOS always, the end-of-turn stop, byte fallback', () => {
    const v = gemmaVocab();
    expect(tokenizer.kind).toBe('bpe');
    expect(tokenizer.addBos).toBe(true);
    expect(tokenizer.encode('Hi')[0]).toBe(v.bos);
    expect([...model.tokenize('Hi', false)].map(Number)).toEqual(tokenizer.encode('Hi', { addSpecial: false }));
    expect(tokenizer.isEndOfGeneration(v.endOfTurn)).toBe(true);
    // a character that is no piece: its UTF-8 bytes as <0xXX> tokens
    const pieces = new Set(v.tokens);
    const rare = ['\u{10FFFD}', '\u{F0000}', '\u{E0001}', '\u{2FFFD}', '\u{1D7FF}'].find((c) => !pieces.has(c))!;
    const ids = tokenizer.encode(rare, { addSpecial: false });
    expect(ids.map((id) => v.tokens[id])).toEqual([...new TextEncoder().encode(rare)].map((b) => `<0x${b.toString(16).toUpperCase()}>`));
    expect(tokenizer.decode(ids)).toBe(rare);
    // decoding drops the space before punctuation as llama.cpp's clean_spaces does
    expect(tokenizer.decode(tokenizer.encode('Hello , world !', { addSpecial: false }))).toBe('Hello, world!');
  });

  test('same ids as llama.cpp over 500+ strings, with and without special-token parsing', () => {
    const all = strings();
    expect(all.length).toBeGreaterThanOrEqual(500);
    const mismatches: string[] = [];
    let compared = 0;
    for (const text of all) {
      for (const parseSpecial of [false, true]) {
        compared++;
        const ours = tokenizer.encode(text, { addSpecial: false, parseSpecial });
        const theirs = [...model.tokenize(text, parseSpecial)].map(Number);
        if (JSON.stringify(ours) !== JSON.stringify(theirs)) mismatches.push(`${JSON.stringify(text)} parseSpecial=${parseSpecial}: ours ${JSON.stringify(ours)} llama.cpp ${JSON.stringify(theirs)}`);
      }
    }
    console.log(`gemma4 tokenizer, llama.cpp tokenize cross-check: ${all.length} strings, ${compared} comparisons, ${mismatches.length} mismatches`);
    expect(mismatches.slice(0, 20)).toEqual([]);
  });

  test('same text as llama.cpp detokenize', () => {
    const mismatches: string[] = [];
    const all = strings().filter((text) => text !== '');
    for (const text of all) {
      const ids = tokenizer.encode(text, { addSpecial: false });
      const theirs = model.detokenize(ids);
      if (tokenizer.decode(ids) !== theirs) mismatches.push(`${JSON.stringify(text)}: ours ${JSON.stringify(tokenizer.decode(ids))} llama.cpp ${JSON.stringify(theirs)}`);
    }
    console.log(`gemma4 tokenizer, llama.cpp detokenize cross-check: ${all.length} strings, ${mismatches.length} mismatches`);
    expect(mismatches.slice(0, 20)).toEqual([]);
  });
});
