// Phi-3's vocabulary (Llama 2's SentencePiece + Phi-3's added tokens, as convert_hf_to_gguf.py
// writes it: test/fixtures/families/phi3.ts) tokenized by us and by llama.cpp (node-llama-cpp) id
// for id over 500+ strings, with and without special-token parsing: Unicode, code, digits, runs of
// spaces and newlines, and Phi-3's special tokens in text, whose RSTRIP (the whitespace after
// <|end|>, <|user|>... goes with them) llama.cpp applies by model name. Then its end-of-turn stops
// and its chat template rendered and tokenized as a prompt.
import { mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { PHI3_ADDED_TOKENS, PHI3_END, PHI3_EOS, PHI4_MINI_ADDED_TOKENS, PHI4_MINI_EOS, writePhi3Gguf } from '../../../../test/fixtures/families/phi3.ts';
import { mulberry32 } from '../../../../test/fixtures/rng.ts';
import { ChatTemplate } from '../chat-template.ts';
import { loadGgufModel } from '../gguf/gguf-model.ts';
import { createGgufTokenizer, type Tokenizer } from './tokenizer.ts';

const dir = join(tmpdir(), 'longhand-phi3-vocab');
mkdirSync(dir, { recursive: true });
// the smallest phi3 model: only its vocabulary is read here
const path = join(dir, 'phi3-vocab-f32.gguf');
const named = join(dir, 'phi35-vocab-f32.gguf');
const tiny = { dim: 64, layers: 1, heads: 2, kvHeads: 2, ffn: 64, context: 4096, seed: 1, type: 'F32' as const };

/** Handwritten strings, then seeded mixes of the awkward parts (≥ 500 in all); `specials`: the vocabulary's added tokens. */
function phi3Strings(specials: readonly string[] = PHI3_ADDED_TOKENS.map((t) => t.content)): string[] {
  const fixed = [
    '', ' ', '  ', '   ', '\n', '\n\n', '\n\n\n', ' \n ', '\t', '\t\t', '\r\n', 'a', 'Hello', ' Hello', 'Hello ', 'Hello  world', 'Hello\nworld',
    'Once upon a time, in a small town by the sea, the boats left the harbor before dawn.', "it's", "don't", "We'll", 'CAPS LOCK', 'mIxEd',
    '0', '1', '12', '123', '1234', '3.14159', '1,000,000', '2026-12-07', '-42', '+1 (555) 010-9999', '0x7fff', '1e-5',
    'def f(x):\n    return x * 2\n', 'for (let i = 0; i < n; i++) {\n\tsum += a[i];\n}', '#include <stdio.h>', 'SELECT * FROM t WHERE id = 7;',
    '    indented', '        deeper', 'trailing   ', '  both  ', 'a    b', 'x\n\n\n\ny', '   \n   \n',
    'café', 'naïve', 'Straße', 'Ωμέγα', 'Привет мир', 'שלום', 'مرحبا', 'नमस्ते', '你好，世界', 'こんにちは', '한국어', '😀', '👍🏽', '👨‍👩‍👧', '🇫🇷', '∑∫√∞', '€£¥',
    '\u00a0nbsp', 'zero\u200bwidth', 'e\u0301', '\u2581', '▁▁', '<0x41>', '[PAD32011]',
    '<s>', '</s>', '<unk>', '<s>Once', 'a </s> b', '</s>   after', '</s>\n\nnext',
    '<|endoftext|>', '<|endoftext|>  x', '<|end|>', '<|end|>\n', '<|end|>\n<|assistant|>\n', '<|user|>\nHi<|end|>\n<|assistant|>\n',
    '<|system|>\nYou are helpful.<|end|>\n<|user|>\nWhat is 2+2?<|end|>\n<|assistant|>\n', '<|user|>   spaced', 'x<|end|>y', '<|end|><|end|>',
    '<|placeholder1|> <|placeholder6|>', '<|end', 'end|>', '<||>', '<|user |>', '< |end| >',
  ];
  const parts = [
    'the', ' ', '  ', '    ', '\n', '\n\n', '\t', 'story', 'Longhand', '.', ',', '!', '?', ':', ';', '"', "'s", '(', ')', '{', '}', '=>', '==',
    '7', '42', '2026', '3.5', '世', '界', 'é', 'ß', 'Ж', '😀', '🐉', 'ü', '\u2581', '-', '_', '#', '<s>', '</s>', '<unk>',
    ...specials,
    // o200k splits letter runs where ASCII case changes, and digits by three
    'camelCaseWord', 'HTTPServer', 'XMLHttpRequest', 'ÉCOLE', 'Ünïcödé', 'iPhone', '12345678', 'x/y/z\n', "DON'T", "they'RE",
  ];
  const random = mulberry32(30);
  const pick = (n: number): number => Math.floor(random() * n);
  const mixed: string[] = [];
  for (let i = 0; i < 460; i++) {
    let text = '';
    const count = 1 + pick(14);
    for (let j = 0; j < count; j++) text += parts[pick(parts.length)];
    mixed.push(text);
  }
  return [...fixed, ...mixed];
}

interface LlamaCppModel {
  tokenize(text: string, special?: boolean): readonly number[];
  detokenize(ids: readonly number[], special?: boolean): string;
  dispose(): Promise<void>;
}

async function llamaCppModel(modelPath: string): Promise<LlamaCppModel> {
  const { getLlama, LlamaLogLevel } = await import('node-llama-cpp');
  const llama = await getLlama({ gpu: false, build: 'never', logLevel: LlamaLogLevel.error });
  return (await llama.loadModel({ modelPath })) as unknown as LlamaCppModel;
}

function tokenizerOf(modelPath: string): Tokenizer {
  const model = loadGgufModel(modelPath);
  try {
    if (model.tokenizer.kind !== 'gguf') throw new Error('not a GGUF tokenizer');
    return createGgufTokenizer(model.tokenizer.metadata);
  } finally {
    model.close();
  }
}

function crossCheck(ours: Tokenizer, theirs: LlamaCppModel, strings: readonly string[]): { compared: number; mismatches: string[] } {
  const mismatches: string[] = [];
  let compared = 0;
  for (const text of strings) {
    for (const parseSpecial of [false, true]) {
      compared++;
      const a = ours.encode(text, { addSpecial: false, parseSpecial });
      const b = [...theirs.tokenize(text, parseSpecial)].map(Number);
      if (JSON.stringify(a) !== JSON.stringify(b)) mismatches.push(`${JSON.stringify(text)} parseSpecial=${parseSpecial}: ours ${JSON.stringify(a)} llama.cpp ${JSON.stringify(b)}`);
    }
  }
  return { compared, mismatches };
}

describe('Phi-3 vocabulary against llama.cpp', () => {
  let ours: Tokenizer;
  let theirs: LlamaCppModel;
  beforeAll(async () => {
    writePhi3Gguf(path, tiny);
    ours = tokenizerOf(path);
    theirs = await llamaCppModel(path);
  }, 120_000);
  afterAll(async () => {
    await theirs?.dispose();
  });

  test('the converter\'s vocabulary: 32064 tokens, Phi-3\'s added ids, specials and end-of-turn stops', () => {
    expect(ours.vocabSize).toBe(32064);
    expect(ours.bos).toBe(1);
    expect(ours.eos).toBe(PHI3_EOS);
    expect(ours.addBos).toBe(false);
    for (const t of PHI3_ADDED_TOKENS) {
      expect(ours.tokenId(t.content)).toBe(t.id);
      expect(ours.isSpecial(t.id)).toBe(true);
    }
    // </s>: Phi-3 re-declares it non-special (the converter writes it user-defined), and llama.cpp
    // makes it control again because its text looks like an end of generation: one more stop, and
    // in text it is a token only with special-token parsing
    expect(ours.isSpecial(2)).toBe(true);
    expect(ours.isEndOfGeneration(2)).toBe(true);
    expect(ours.encode('</s>', { addSpecial: false, parseSpecial: true })).toEqual([2]);
    expect(ours.encode('</s>', { addSpecial: false, parseSpecial: false })).not.toEqual([2]);
    // <|endoftext|> (EOS) and <|end|> (a turn's end) both stop generation, as llama.cpp's EOG set
    expect(ours.eosIds).toEqual(expect.arrayContaining([PHI3_EOS, PHI3_END]));
    expect(ours.isEndOfGeneration(PHI3_END)).toBe(true);
    expect(ours.isEndOfGeneration(32010)).toBe(false);
  });

  test('same ids as llama.cpp over 500+ strings, with and without special-token parsing', () => {
    const strings = phi3Strings();
    expect(strings.length).toBeGreaterThanOrEqual(500);
    const { compared, mismatches } = crossCheck(ours, theirs, strings);
    console.log(`Phi-3 tokenize vs llama.cpp: ${strings.length} strings, ${compared} comparisons, ${mismatches.length} mismatches`);
    expect(mismatches).toEqual([]);
  });

  test('RSTRIP of the added tokens: the whitespace after <|end|> goes with it, after <|endoftext|> it stays', () => {
    const end = ours.encode('<|end|>\n\nHi', { addSpecial: false, parseSpecial: true });
    expect(end).toEqual([PHI3_END, ...ours.encode('Hi', { addSpecial: false })]);
    const eos = ours.encode('<|endoftext|>\nHi', { addSpecial: false, parseSpecial: true });
    expect(eos[0]).toBe(PHI3_EOS);
    expect(eos.length).toBeGreaterThan(1 + ours.encode('Hi', { addSpecial: false }).length - 1);
    expect(ours.decode(eos.slice(1))).toContain('\n');
  });

  test('detokenize: same text as llama.cpp', () => {
    const mismatches: string[] = [];
    for (const text of phi3Strings().filter((t) => t !== '')) {
      const ids = [...theirs.tokenize(text, true)].map(Number);
      const a = ours.decode(ids, { skipSpecial: false });
      const b = theirs.detokenize(ids, true);
      if (a !== b) mismatches.push(`${JSON.stringify(text)}: ours ${JSON.stringify(a)} llama.cpp ${JSON.stringify(b)}`);
    }
    expect(mismatches).toEqual([]);
  });

  test('the chat template renders Phi-3\'s turns and tokenizes to its turn markers', () => {
    const model = loadGgufModel(path);
    const template = ChatTemplate.forTokenizer(model.chatTemplate, ours);
    model.close();
    const text = template.render([
      { role: 'system', content: 'You are a careful writer.' },
      { role: 'user', content: 'Write one line.' },
    ]);
    expect(text).toBe('<|system|>\nYou are a careful writer.<|end|>\n<|user|>\nWrite one line.<|end|>\n<|assistant|>\n');
    const ids = ours.encode(text, template.encodeOptionsFor(text));
    expect(ids).toEqual([...theirs.tokenize(text, true)].map(Number));
    expect(ids[0]).toBe(32006);
    expect(ids.at(-1)).toBe(32001);
    expect(ids.filter((id) => id === PHI3_END)).toHaveLength(2);
  });
});

describe('Phi-3 vocabulary without llama.cpp\'s phi-3 name rule', () => {
  test('a file named "Phi 3.5 Mini Instruct" strips nothing, in llama.cpp as in ours', async () => {
    writePhi3Gguf(named, { ...tiny, name: 'Phi 3.5 Mini Instruct' });
    const ours = tokenizerOf(named);
    const theirs = await llamaCppModel(named);
    try {
      const strings = ['<|end|>\n\nHi', '<|user|>  x<|end|> \n<|assistant|>\n', '</s> y', ...phi3Strings().slice(0, 120)];
      const { mismatches } = crossCheck(ours, theirs, strings);
      expect(mismatches).toEqual([]);
      expect(ours.encode('<|end|>\nHi', { addSpecial: false, parseSpecial: true }).length).toBeGreaterThan(ours.encode('<|end|>Hi', { addSpecial: false, parseSpecial: true }).length);
    } finally {
      await theirs.dispose();
    }
  }, 120_000);
});

describe('Phi-4-mini vocabulary (o200k) against llama.cpp', () => {
  const phi4 = join(dir, 'phi4-mini-vocab-f16.gguf');
  let ours: Tokenizer;
  let theirs: LlamaCppModel;
  beforeAll(async () => {
    writePhi3Gguf(phi4, { ...tiny, vocab: 'phi4-mini', tied: true, rotaryFraction: 0.75, type: 'F16', name: 'Phi 4 Mini Instruct' });
    ours = tokenizerOf(phi4);
    theirs = await llamaCppModel(phi4);
  }, 180_000);
  afterAll(async () => {
    await theirs?.dispose();
  });

  test('200064 tokens, Phi-4-mini\'s chat tokens, <|endoftext|> and <|end|> stop', () => {
    expect(ours.kind).toBe('bpe');
    expect(ours.vocabSize).toBe(200064);
    expect(ours.eos).toBe(PHI4_MINI_EOS);
    for (const t of PHI4_MINI_ADDED_TOKENS) expect(ours.tokenId(t.content)).toBe(t.id);
    expect(ours.eosIds).toEqual(expect.arrayContaining([199999, 200020]));
  });

  test('same ids as llama.cpp over 500+ strings, with and without special-token parsing', () => {
    const strings = phi3Strings(PHI4_MINI_ADDED_TOKENS.map((t) => t.content));
    expect(strings.length).toBeGreaterThanOrEqual(500);
    const { compared, mismatches } = crossCheck(ours, theirs, strings);
    console.log(`Phi-4-mini tokenize vs llama.cpp: ${strings.length} strings, ${compared} comparisons, ${mismatches.length} mismatches`);
    expect(mismatches).toEqual([]);
  });

  test('the chat template renders Phi-4-mini\'s turns and tokenizes as llama.cpp does', () => {
    const model = loadGgufModel(phi4);
    const template = ChatTemplate.forTokenizer(model.chatTemplate, ours);
    model.close();
    const text = template.render([
      { role: 'system', content: 'You are a careful writer.' },
      { role: 'user', content: 'Write one line.' },
    ]);
    expect(text).toBe('<|system|>You are a careful writer.<|end|><|user|>Write one line.<|end|><|assistant|>');
    const ids = ours.encode(text, template.encodeOptionsFor(text));
    expect(ids).toEqual([...theirs.tokenize(text, true)].map(Number));
    expect(ids.at(-1)).toBe(200019);
  });
});
