// GGUF tokenizer metadata that cannot work fails with a typed error naming the key.
import { describe, expect, test } from 'vitest';
import { readGgufVocab } from './gguf-vocab.ts';
import { createGgufTokenizer } from './tokenizer.ts';

const TOKENS = ['<unk>', '<s>', '</s>', ...Array.from({ length: 256 }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`), '\u2581', 'a', 'b', '\u2581a', 'ab'];
const TYPES = TOKENS.map((t, i) => (i === 0 ? 2 : i < 3 ? 3 : t.startsWith('<0x') ? 6 : 1));

function spm(overrides: Record<string, unknown> = {}): Map<string, unknown> {
  const base: Record<string, unknown> = {
    'tokenizer.ggml.model': 'llama',
    'tokenizer.ggml.tokens': TOKENS,
    'tokenizer.ggml.scores': Float32Array.from(TOKENS, (_, i) => -i),
    'tokenizer.ggml.token_type': Int32Array.from(TYPES),
    'tokenizer.ggml.bos_token_id': 1,
    'tokenizer.ggml.eos_token_id': 2,
    'tokenizer.ggml.unknown_token_id': 0,
  };
  const merged = { ...base, ...overrides };
  return new Map(Object.entries(merged).filter(([, value]) => value !== undefined));
}

function code(make: () => unknown): string | undefined {
  try {
    make();
  } catch (error) {
    return (error as { code?: string }).code;
  }
  return undefined;
}

describe('GGUF tokenizer metadata', () => {
  test('a small valid SentencePiece vocabulary works', () => {
    const tokenizer = createGgufTokenizer(spm());
    // scores are -id: "▁a" (id 262) outscores "ab" (263), and "▁ab" is not a token
    expect(tokenizer.encode('ab').map((id) => tokenizer.tokenPiece(id))).toEqual(['<s>', '\u2581a', 'b']);
    expect(tokenizer.decode(tokenizer.encode('ab'))).toBe(' ab');
    expect(tokenizer.decode(tokenizer.encode('ab', { addSpecial: false }))).toBe('ab');
  });

  test('bigints, plain arrays and the "none" id 0xFFFFFFFF are accepted', () => {
    const vocab = readGgufVocab(spm({ 'tokenizer.ggml.bos_token_id': 1n, 'tokenizer.ggml.scores': Array.from(TOKENS, () => 0), 'tokenizer.ggml.padding_token_id': 0xffffffff }));
    expect(vocab.bos).toBe(1);
    expect(vocab.pad).toBeUndefined();
    expect(vocab.addBos).toBe(true);
    expect(vocab.addSpacePrefix).toBe(true);
  });

  const cases: [string, Record<string, unknown>, string][] = [
    ['tokens missing', { 'tokenizer.ggml.tokens': undefined }, 'TOKENIZER_INVALID'],
    ['tokens empty', { 'tokenizer.ggml.tokens': [] }, 'TOKENIZER_INVALID'],
    ['tokens not strings', { 'tokenizer.ggml.tokens': [...TOKENS.slice(0, -1), 7] }, 'TOKENIZER_INVALID'],
    ['scores length mismatch', { 'tokenizer.ggml.scores': new Float32Array(TOKENS.length - 1) }, 'TOKENIZER_INVALID'],
    ['scores missing for llama', { 'tokenizer.ggml.scores': undefined }, 'TOKENIZER_INVALID'],
    ['scores NaN', { 'tokenizer.ggml.scores': Float32Array.from(TOKENS, () => NaN) }, 'TOKENIZER_INVALID'],
    ['token_type out of range', { 'tokenizer.ggml.token_type': Int32Array.from(TYPES, (t, i) => (i === 5 ? 9 : t)) }, 'TOKENIZER_INVALID'],
    ['token_type length mismatch', { 'tokenizer.ggml.token_type': Int32Array.from(TYPES.slice(1)) }, 'TOKENIZER_INVALID'],
    ['bos id out of range', { 'tokenizer.ggml.bos_token_id': TOKENS.length }, 'TOKENIZER_INVALID'],
    ['eos id negative', { 'tokenizer.ggml.eos_token_id': -5 }, 'TOKENIZER_INVALID'],
    ['bos id not an integer', { 'tokenizer.ggml.bos_token_id': 1.5 }, 'TOKENIZER_INVALID'],
    ['add_bos_token not a boolean', { 'tokenizer.ggml.add_bos_token': 1 }, 'TOKENIZER_INVALID'],
    ['add_bos_token without a BOS', { 'tokenizer.ggml.bos_token_id': 0xffffffff, 'tokenizer.ggml.add_bos_token': true }, 'TOKENIZER_INVALID'],
    ['model missing', { 'tokenizer.ggml.model': undefined }, 'MODEL_MISSING_METADATA'],
    ['model unsupported', { 'tokenizer.ggml.model': 't5' }, 'TOKENIZER_INVALID'],
    ['gpt2 merges missing', { 'tokenizer.ggml.model': 'gpt2' }, 'TOKENIZER_INVALID'],
    ['gpt2 merge without a space', { 'tokenizer.ggml.model': 'gpt2', 'tokenizer.ggml.merges': ['a b', 'ab'] }, 'TOKENIZER_INVALID'],
    ['gpt2 merge with an empty right side', { 'tokenizer.ggml.model': 'gpt2', 'tokenizer.ggml.merges': ['a '] }, 'TOKENIZER_INVALID'],
    ['gpt2 merge not a string', { 'tokenizer.ggml.model': 'gpt2', 'tokenizer.ggml.merges': [3] }, 'TOKENIZER_INVALID'],
  ];
  for (const [name, overrides, expected] of cases) {
    test(`${name} → ${expected}`, () => {
      expect(code(() => createGgufTokenizer(spm(overrides)))).toBe(expected);
    });
  }

  test('the error names the key', () => {
    expect(() => createGgufTokenizer(spm({ 'tokenizer.ggml.scores': new Float32Array(3) }))).toThrow(/tokenizer\.ggml\.scores has 3 entries for 264 tokens/);
  });
});
