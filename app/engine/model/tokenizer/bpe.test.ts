// Byte-level BPE on a small hand-made vocabulary whose merges we can follow on paper.
import { describe, expect, test } from 'vitest';
import { BYTE_TO_CHAR } from './bpe.ts';
import type { BpeTokenizer } from './bpe.ts';
import { StreamDecoder, createGgufTokenizer } from './tokenizer.ts';

const MERGES = ['Ġ t', 'h e', 'Ġt he', 'l l', 'he ll', 'hell o', 'Ġ c'];
const EXTRA = ['Ġt', 'he', 'Ġthe', 'll', 'hell', 'hello', 'Ġc', 'Ġcat'];
const SPECIAL = ['<|endoftext|>', '<|im_end|>'];
// ids: 0..255 the byte characters, 256.. EXTRA, then the two control tokens
const TOKENS = [...BYTE_TO_CHAR, ...EXTRA, ...SPECIAL];
const id = (piece: string): number => TOKENS.indexOf(piece);

function metadata(pre: string, extra: Record<string, unknown> = {}): Map<string, unknown> {
  return new Map<string, unknown>(Object.entries({
    'tokenizer.ggml.model': 'gpt2',
    'tokenizer.ggml.pre': pre,
    'tokenizer.ggml.tokens': TOKENS,
    'tokenizer.ggml.token_type': Int32Array.from(TOKENS, (t) => (SPECIAL.includes(t) ? 3 : 1)),
    'tokenizer.ggml.merges': MERGES,
    'tokenizer.ggml.bos_token_id': id('<|endoftext|>'),
    'tokenizer.ggml.eos_token_id': id('<|endoftext|>'),
    ...extra,
  }));
}

describe('byte-level BPE (gpt2)', () => {
  const tokenizer = createGgufTokenizer(metadata('gpt2')) as BpeTokenizer;

  test('the byte map is GPT-2\'s', () => {
    expect(BYTE_TO_CHAR[0x20]).toBe('Ġ');
    expect(BYTE_TO_CHAR[0x0a]).toBe('Ċ');
    expect(BYTE_TO_CHAR[0x41]).toBe('A');
    expect(BYTE_TO_CHAR[0x00]).toBe('Ā');
    expect(BYTE_TO_CHAR[0xad]).toBe('Ń'); // soft hyphen is not printable: 256 + 67 = U+0143
    expect(new Set(BYTE_TO_CHAR).size).toBe(256);
  });

  test('merges by rank, as worked out by hand', () => {
    // "hello": h+e (rank 1), l+l (3), he+ll (4), hell+o (5)
    expect(tokenizer.encode('hello')).toEqual([id('hello')]);
    // " the": Ġ+t (0), h+e (1), Ġt+he (2)
    expect(tokenizer.encode(' the')).toEqual([id('Ġthe')]);
    // " cat": Ġ+c (6), no further merge; gpt2 has no whole-word lookup, so Ġcat is not used
    expect(tokenizer.encode(' cat')).toEqual([id('Ġc'), id('a'), id('t')]);
    // equal ranks: the leftmost pair first → "ll" + "l"
    expect(tokenizer.encode('lll')).toEqual([id('ll'), id('l')]);
    expect(tokenizer.encode('hello the cat')).toEqual([id('hello'), id('Ġthe'), id('Ġc'), id('a'), id('t')]);
    expect(tokenizer.addBos).toBe(false);
  });

  test('pre-tokenizer splits like GPT-2', () => {
    expect(tokenizer.preTokenize("Hello world's 12345  x\n\ny!?")).toEqual(['Hello', ' world', "'s", ' 12345', ' ', ' x', '\n', '\n', 'y', '!?']);
  });

  test('any text round-trips through byte tokens, and streams', () => {
    const text = 'héllo 😀 世界\n\ttabs  and spaces';
    const ids = tokenizer.encode(text);
    expect(tokenizer.decode(ids)).toBe(text);
    const stream = new StreamDecoder(tokenizer);
    const chunks = ids.map((i) => stream.push(i));
    expect(chunks.join('') + stream.flush()).toBe(text);
    expect(chunks.some((chunk) => chunk.includes('\uFFFD'))).toBe(false);
  });

  test('special tokens only with parseSpecial; end-of-generation ids', () => {
    expect(tokenizer.encode('a<|im_end|>', { parseSpecial: true })).toEqual([id('a'), id('<|im_end|>')]);
    expect(tokenizer.encode('a<|im_end|>')).not.toContain(id('<|im_end|>'));
    expect(tokenizer.eosIds).toEqual([id('<|endoftext|>'), id('<|im_end|>')]);
    expect(tokenizer.decode([id('hello'), id('<|im_end|>')])).toBe('hello');
    expect(tokenizer.decode([id('hello'), id('<|im_end|>')], { skipSpecial: false })).toBe('hello<|im_end|>');
    expect(tokenizer.tokenPiece(id('Ġthe'))).toBe('Ġthe');
  });
});

describe('byte-level BPE (llama3 and qwen2 pre-tokenizers)', () => {
  test('llama3: whole words that are tokens skip the merges; BOS by default; digits in threes', () => {
    const tokenizer = createGgufTokenizer(metadata('llama-bpe')) as BpeTokenizer;
    expect(tokenizer.family).toBe('llama3');
    expect(tokenizer.addBos).toBe(true);
    expect(tokenizer.encode(' cat')).toEqual([id('<|endoftext|>'), id('Ġcat')]);
    expect(tokenizer.preTokenize("12345 I'M here\n\n  x")).toEqual(['123', '45', ' I', "'M", ' here', '\n\n', ' ', ' x']);
  });

  test('qwen2: single digits', () => {
    const tokenizer = createGgufTokenizer(metadata('qwen2')) as BpeTokenizer;
    expect(tokenizer.preTokenize('x 2024!')).toEqual(['x', ' ', '2', '0', '2', '4', '!']);
    expect(tokenizer.addBos).toBe(false);
  });

  test('add_bos_token in the file wins over the default', () => {
    expect(createGgufTokenizer(metadata('llama-bpe', { 'tokenizer.ggml.add_bos_token': false })).addBos).toBe(false);
  });

  test('an unknown pre-tokenizer is refused', () => {
    expect(() => createGgufTokenizer(metadata('starcoder-unknown'))).toThrow(expect.objectContaining({ code: 'TOKENIZER_INVALID' }));
  });
});
