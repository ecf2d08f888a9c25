// The Qwen3.5 pre-tokenizer ("qwen35": qwen2's pattern with combining marks \p{M} counted with the
// letters) against llama.cpp's own, on the qwen35 fixture (test/fixtures/families/qwen35.ts). The
// vocabulary in that file is Qwen3's (no package here ships Qwen3.5's 248K-token vocabulary), so
// what this holds is the pre-tokenizer's splitting and the BPE over it, with Qwen3's merges: the
// strings lean on marks (accents written as combining characters, Devanagari, Thai, Arabic
// harakat, Hebrew points, emoji modifiers), where "qwen35" and "qwen2" split differently.
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { qwen35GgufFixture } from '../../../../test/fixtures/families/qwen35.ts';
import { mulberry32 } from '../../../../test/fixtures/rng.ts';
import { loadModel } from '../load-model.ts';
import type { LoadedModel } from '../types.ts';
import { BpeTokenizer } from './bpe.ts';
import { createTokenizer, type Tokenizer } from './tokenizer.ts';

function strings(): string[] {
  const fixed = [
    'e\u0301 combining', 'cafe\u0301', 'nai\u0308ve', 'A\u030a', 'o\u0308\u0301', ' \u0301', '\u0301\u0301\u0301', 'x\u0301y\u0302z\u0303', '1\u0301', '!\u0301', '\u0301abc', 'abc \u0301 def',
    'नमस्ते दुनिया', 'हिन्दी', 'क्षत्रिय', 'ภาษาไทย', 'สวัสดีครับ', 'مَرْحَبًا', 'السَّلَامُ عَلَيْكُمْ', 'שָׁלוֹם', 'Tiếng Việt', 'Ελληνικά', 'ἀρχή', 'ქართული',
    'café', 'naïve', 'Straße', 'Привет мир', '你好，世界', 'こんにちは', '한국어', '😀', '👍🏽', '👨‍👩‍👧', '🇫🇷', '😶‍🌫️', 'zero\u200bwidth', '\u20dd\u20e3', '1\u20e3 keycap',
    'Hello, world!', "it's", "They'RE", '123456', '  spaces  ', '\n\n', 'line\r\nbreak', 'def f(x):\n    return x ** 2\n', '<|im_start|>user\nHi<|im_end|>\n',
  ];
  const parts = ['a', 'e', ' ', '\u0301', '\u0308', '\u0327', 'न', '\u094d', '\u093e', 'ก', '\u0e31', 'ب', '\u064e', '\u0651', '1', '!', '.', '\n', '世', '😀', '\u200d', '\ufe0f', 'x', ' the', "'s"];
  const random = mulberry32(3535);
  const mixed: string[] = [];
  for (let i = 0; i < 220; i++) {
    let text = '';
    const count = 1 + Math.floor(random() * 12);
    for (let j = 0; j < count; j++) text += parts[Math.floor(random() * parts.length)];
    mixed.push(text);
  }
  return [...fixed, ...mixed];
}

let model: LoadedModel;
let tokenizer: Tokenizer;
let reference: { tokenize(text: string, special?: boolean): readonly number[]; dispose(): Promise<void> };

beforeAll(async () => {
  model = await loadModel(qwen35GgufFixture('F32'));
  tokenizer = await createTokenizer(model.tokenizer);
  const { getLlama } = await import('node-llama-cpp');
  const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error' as never });
  reference = (await llama.loadModel({ modelPath: qwen35GgufFixture('F32'), vocabOnly: true })) as unknown as typeof reference;
}, 120_000);
afterAll(async () => {
  await reference?.dispose();
  model?.close();
});

describe('Qwen3.5 pre-tokenizer (qwen35) against llama.cpp', () => {
  test('the file says qwen35, and marks stay with their letters (qwen2 splits them off)', () => {
    expect(tokenizer instanceof BpeTokenizer && tokenizer.family).toBe('qwen35');
    const words = (tokenizer as BpeTokenizer).preTokenize('cafe\u0301 हिन्दी');
    expect(words).toEqual(['cafe\u0301', ' हिन्दी']);
  });

  test('same ids as llama.cpp over 250+ strings heavy in combining marks, with and without special-token parsing', () => {
    const all = strings();
    expect(all.length).toBeGreaterThanOrEqual(250);
    const mismatches: string[] = [];
    for (const text of all) {
      for (const parseSpecial of [false, true]) {
        const ours = tokenizer.encode(text, { addSpecial: false, parseSpecial });
        const theirs = [...reference.tokenize(text, parseSpecial)].map(Number);
        if (JSON.stringify(ours) !== JSON.stringify(theirs)) mismatches.push(`${JSON.stringify(text)} parseSpecial=${parseSpecial}: ours ${JSON.stringify(ours)} llama.cpp ${JSON.stringify(theirs)}`);
      }
    }
    console.log(`qwen35 tokenize vs llama.cpp: ${all.length} strings, ${all.length * 2} comparisons, ${mismatches.length} mismatches`);
    expect(mismatches).toEqual([]);
  });
});
