// SentencePiece on the shared stories260K model: the reference run's ids and texts exactly, and
// llama.cpp's own tokenizer (node-llama-cpp, dev dependency) id for id over a few hundred strings.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { haveSharedModel, loadReferenceRuns, STORIES_260K } from '../../../../test/support/models.ts';
import { loadGgufModel } from '../gguf/gguf-model.ts';
import { parseGguf } from '../gguf/reader.ts';
import { StreamDecoder, createGgufTokenizer, createTokenizer } from './tokenizer.ts';
import type { Tokenizer } from './tokenizer.ts';

const have = haveSharedModel();

function storiesMetadata(): ReadonlyMap<string, unknown> {
  return parseGguf(new Uint8Array(readFileSync(STORIES_260K)), 'stories260K.gguf').metadata;
}

/** Handwritten strings, then seeded random mixes of the awkward parts. */
function crossCheckStrings(): string[] {
  const fixed = [
    '', ' ', '  ', '   ', 'a', 'A', 'Once upon a time', ' Once upon a time', 'Once upon a time ', 'Once  upon   a    time',
    'Hello, world!', 'hello\nworld', '\n', '\n\n', 'a\n\nb', '\t', 'tab\tseparated\tvalues', 'line\r\nbreak',
    '0', '123', '3.14159', '1,000,000', '2024-05-01', '007', '-42', '+1 (555) 010-9999',
    'Lily and Tom went to the park. They saw a big red ball.', '"Hi," said Mom. "Let\'s go!"',
    "it's", "don't", "I'm", "we'll", 'CAPS LOCK', 'MiXeD cAsE',
    '!?.,;:', '...', '---', '***', '((()))', '[x]', '{y}', '<>', '@#$%^&*', '~`|\\/', '_under_score_',
    'café', 'naïve', 'résumé', 'Straße', 'über', 'Ωμέγα', 'Привет мир', 'שלום', 'مرحبا', 'नमस्ते',
    '世界', '你好，世界', 'こんにちは', '한국어', '😀', '😀😀', 'smile 😀 face', '👍🏽', '👨‍👩‍👧', '🇫🇷', '∑∫√∞', '€£¥',
    '\u00a0nbsp', 'zero\u200bwidth', 'é (combining e\u0301)', '\u2581 literal lower-one-eighth block', '▁▁',
    '<s>', '</s>', '<unk>', '<s>Once', 'a <s> b', '<s></s>', '<0x41>', '<0x0A>', '<<s>>', '</s> end', 's>', '<s',
  ];
  const parts = [
    'the', ' ', '  ', 'Lily', 'ball', 'ran', '.', ',', '!', '?', '\n', '\n\n', '\t', '7', '42', '2024', "'s", '"',
    '😀', '🐉', '世', '界', 'é', 'ß', 'Ж', 'ü', '<s>', '</s>', '<unk>', '▁', '-', '(', ')', 'X', 'zz', 'q',
  ];
  let seed = 12345;
  const random = (n: number): number => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return (seed >>> 8) % n;
  };
  const mixed: string[] = [];
  for (let i = 0; i < 180; i++) {
    let text = '';
    const count = 1 + random(12);
    for (let j = 0; j < count; j++) text += parts[random(parts.length)];
    mixed.push(text);
  }
  return [...fixed, ...mixed];
}

describe.skipIf(!have)('SentencePiece on stories260K', () => {
  let tokenizer: Tokenizer;
  beforeAll(() => {
    tokenizer = createGgufTokenizer(storiesMetadata());
  });

  test('vocabulary and special tokens', () => {
    expect(tokenizer.kind).toBe('spm');
    expect(tokenizer.vocabSize).toBe(512);
    expect(tokenizer.bos).toBe(1);
    expect(tokenizer.eos).toBe(2);
    expect(tokenizer.eosIds).toEqual([2]);
    expect(tokenizer.addBos).toBe(true);
    expect(tokenizer.addEos).toBe(false);
    expect(tokenizer.isSpecial(1)).toBe(true);
    expect(tokenizer.isSpecial(0)).toBe(true);
    expect(tokenizer.isSpecial(403)).toBe(false);
    expect(tokenizer.isEndOfGeneration(2)).toBe(true);
    expect(tokenizer.tokenPiece(403)).toBe('\u2581Once');
    expect(tokenizer.tokenId('\u2581Once')).toBe(403);
  });

  test('createTokenizer builds it from the LoadedModel our GGUF loader returns', async () => {
    const model = loadGgufModel(STORIES_260K);
    try {
      const built = await createTokenizer(model.tokenizer);
      for (const run of loadReferenceRuns()) expect(built.encode(run.prompt)).toEqual(run.promptIds);
    } finally {
      model.close();
    }
  });

  for (const run of have ? loadReferenceRuns() : []) {
    test(`reference run ${JSON.stringify(run.prompt)}: ids, texts and pieces`, () => {
      expect(tokenizer.encode(run.prompt)).toEqual(run.promptIds);
      // text: BOS first keeps the leading space of " Once"; generatedText: llama.cpp drops it
      expect(tokenizer.decode([...run.promptIds, ...run.generatedIds])).toBe(run.text);
      expect(tokenizer.decode(run.generatedIds)).toBe(run.generatedText);
      expect(run.generatedIds.map((id) => tokenizer.tokenPiece(id))).toEqual(run.generatedPieces);
      // what a UI appends after the prompt, token by token
      const stream = new StreamDecoder(tokenizer);
      const streamed = run.generatedIds.map((id) => stream.push(id)).join('') + stream.flush();
      expect(tokenizer.decode(run.promptIds) + streamed).toBe(run.text);
      expect(tokenizer.decode(run.generatedIds, { continuation: true })).toBe(streamed);
    });
  }

  test('the empty prompt is BOS alone, or nothing without special tokens', () => {
    expect(tokenizer.encode('')).toEqual([1]);
    expect(tokenizer.encode('', { addSpecial: false })).toEqual([]);
  });

  test('control tokens in text are text unless parseSpecial', () => {
    const literal = tokenizer.encode('a <s> b', { addSpecial: false });
    expect(literal).not.toContain(1);
    const parsed = tokenizer.encode('a <s> b', { addSpecial: false, parseSpecial: true });
    expect(parsed).toContain(1);
    expect(tokenizer.decode(parsed, { skipSpecial: false, continuation: true })).toBe(' a <s> b'.replace('<s> ', '<s>  '));
  });

  test('byte fallback round-trips emoji and CJK', () => {
    for (const text of ['😀 and 世界', 'Ωμέγα €', '👨‍👩‍👧']) {
      const ids = tokenizer.encode(text, { addSpecial: false });
      expect(ids.some((id) => /^<0x[0-9A-F]{2}>$/.test(tokenizer.tokenPiece(id)))).toBe(true);
      expect(tokenizer.decode(ids)).toBe(text);
    }
  });

  test('StreamDecoder never emits half a character', () => {
    const text = 'The dragon 🐉 said 你好, then 😀👍🏽 — done.';
    const ids = tokenizer.encode(text, { addSpecial: false });
    const stream = new StreamDecoder(tokenizer);
    const chunks = ids.map((id) => stream.push(id));
    chunks.push(stream.flush());
    expect(chunks.join('')).toBe(` ${text}`); // the space prefix; continuation keeps it
    expect(chunks.join('')).toBe(tokenizer.decode(ids, { continuation: true }));
    for (const chunk of chunks) expect(chunk).not.toContain('\uFFFD');
    // a byte-fallback character arrives over several ids: nothing until its last byte
    const dragon = tokenizer.encode('🐉', { addSpecial: false }).slice(-4);
    expect(dragon.map((id) => tokenizer.tokenPiece(id))).toEqual(['<0xF0>', '<0x9F>', '<0x90>', '<0x89>']);
    const partial = new StreamDecoder(tokenizer);
    expect(dragon.map((id) => partial.push(id))).toEqual(['', '', '', '🐉']);
    // a stream that stops mid-character flushes a replacement character
    const cut = new StreamDecoder(tokenizer);
    expect(dragon.slice(0, 2).map((id) => cut.push(id)).join('') + cut.flush()).toBe('\uFFFD');
  });

  test('token ids outside the vocabulary are rejected', () => {
    expect(() => tokenizer.decode([512])).toThrow(expect.objectContaining({ code: 'TOKENIZER_INVALID' }));
    expect(() => tokenizer.tokenPiece(-1)).toThrow(expect.objectContaining({ code: 'TOKENIZER_INVALID' }));
  });
});

describe.skipIf(!have)('SentencePiece against llama.cpp (node-llama-cpp)', () => {
  let tokenizer: Tokenizer;
  let model: { tokenize(text: string, special?: boolean): readonly number[]; detokenize(ids: readonly number[], special?: boolean): string; dispose(): Promise<void> };
  beforeAll(async () => {
    tokenizer = createGgufTokenizer(storiesMetadata());
    const { getLlama } = await import('node-llama-cpp');
    const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error' as never });
    model = (await llama.loadModel({ modelPath: STORIES_260K })) as unknown as typeof model;
  });
  afterAll(async () => {
    await model?.dispose();
  });

  test('same ids as llama.cpp over 250+ strings, with and without special-token parsing', () => {
    const strings = crossCheckStrings();
    expect(strings.length).toBeGreaterThanOrEqual(250);
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
    console.log(`llama.cpp tokenize cross-check: ${strings.length} strings, ${compared} comparisons, ${mismatches.length} mismatches`);
    expect(mismatches).toEqual([]);
  });

  test('same text as llama.cpp detokenize', () => {
    const mismatches: string[] = [];
    const strings = crossCheckStrings().filter((text) => text !== '');
    for (const text of strings) {
      const ids = tokenizer.encode(text, { addSpecial: false });
      const theirs = model.detokenize(ids);
      if (tokenizer.decode(ids) !== theirs) mismatches.push(`${JSON.stringify(text)}: ours ${JSON.stringify(tokenizer.decode(ids))} llama.cpp ${JSON.stringify(theirs)}`);
    }
    console.log(`llama.cpp detokenize cross-check: ${strings.length} strings, ${mismatches.length} mismatches`);
    expect(mismatches).toEqual([]);
  });
});
