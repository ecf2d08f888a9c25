// tokenizer.json through @huggingface/tokenizers: a small byte-level BPE written here, with a
// Llama-3 style post-processor (BOS first) and special and plain added tokens.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { loadHfTokenizer } from './hf-tokenizer-json.ts';
import { StreamDecoder, createTokenizer } from './tokenizer.ts';

const VOCAB_LIST = ['<unk>', 'h', 'e', 'l', 'o', 'Ġ', 'w', 'r', 'd', 'he', 'll', 'hell', 'hello', 'Ġw', 'or', 'Ġwor', 'ld', 'Ġworld', '<', '|', '>', 'x', 'Ã', '©'];
const BOS = VOCAB_LIST.length; // 24
const EOT = BOS + 1; // 25
const CUSTOM = BOS + 2; // 26

const TOKENIZER_JSON = {
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: [
    { id: BOS, content: '<|begin_of_text|>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true },
    { id: EOT, content: '<|eot_id|>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true },
    { id: CUSTOM, content: '<custom>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: false },
  ],
  normalizer: null,
  pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
  post_processor: {
    type: 'TemplateProcessing',
    single: [{ SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
    pair: [{ SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
    special_tokens: { '<|begin_of_text|>': { id: '<|begin_of_text|>', ids: [BOS], tokens: ['<|begin_of_text|>'] } },
  },
  decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: {
    type: 'BPE',
    dropout: null,
    unk_token: '<unk>',
    continuing_subword_prefix: null,
    end_of_word_suffix: null,
    fuse_unk: false,
    byte_fallback: false,
    vocab: Object.fromEntries(VOCAB_LIST.map((token, i) => [token, i])),
    merges: ['h e', 'l l', 'he ll', 'hell o', 'Ġ w', 'o r', 'Ġw or', 'l d', 'Ġwor ld'],
  },
};
const CONFIG_JSON = { bos_token: '<|begin_of_text|>', eos_token: { content: '<|eot_id|>' }, clean_up_tokenization_spaces: true };

const dir = mkdtempSync(join(tmpdir(), 'longhand-hf-tokenizer-'));
function write(name: string, value: unknown): string {
  const path = join(dir, name);
  writeFileSync(path, typeof value === 'string' ? value : JSON.stringify(value));
  return path;
}
const tokenizerPath = write('tokenizer.json', TOKENIZER_JSON);
const configPath = write('tokenizer_config.json', CONFIG_JSON);
const id = (piece: string): number => VOCAB_LIST.indexOf(piece);

describe('tokenizer.json through @huggingface/tokenizers', () => {
  const tokenizer = loadHfTokenizer(tokenizerPath, configPath);

  test('special tokens from tokenizer_config.json and the post-processor', () => {
    expect(tokenizer.kind).toBe('hf');
    expect(tokenizer.vocabSize).toBe(27);
    expect(tokenizer.bos).toBe(BOS);
    expect(tokenizer.eos).toBe(EOT);
    expect(tokenizer.eosIds).toEqual([EOT]);
    expect(tokenizer.addBos).toBe(true);
    expect(tokenizer.addEos).toBe(false);
    expect(tokenizer.specialTexts).toEqual({ bos: '<|begin_of_text|>', eos: '<|eot_id|>', unk: undefined, pad: undefined });
    expect(tokenizer.isSpecial(EOT)).toBe(true);
    expect(tokenizer.isSpecial(CUSTOM)).toBe(false);
    expect(tokenizer.tokenPiece(id('Ġworld'))).toBe('Ġworld');
  });

  test('encodes by merges, BOS first; decodes back', () => {
    expect(tokenizer.encode('hello world')).toEqual([BOS, id('hello'), id('Ġworld')]);
    expect(tokenizer.encode('hello world', { addSpecial: false })).toEqual([id('hello'), id('Ġworld')]);
    expect(tokenizer.decode([BOS, id('hello'), id('Ġworld'), EOT])).toBe('hello world');
    expect(tokenizer.decode([BOS, id('hello'), EOT], { skipSpecial: false })).toBe('<|begin_of_text|>hello<|eot_id|>');
    expect(tokenizer.decode([])).toBe('');
  });

  test('special tokens in text only with parseSpecial; plain added tokens always', () => {
    expect(tokenizer.encode('hello<|eot_id|>', { addSpecial: false, parseSpecial: true })).toEqual([id('hello'), EOT]);
    const literal = tokenizer.encode('hello<|eot_id|>', { addSpecial: false });
    expect(literal).not.toContain(EOT);
    expect(literal.slice(0, 3)).toEqual([id('hello'), id('<'), id('|')]);
    expect(tokenizer.encode('x<custom>x', { addSpecial: false })).toEqual([id('x'), CUSTOM, id('x')]);
  });

  test('StreamDecoder holds a split two-byte character until it is complete', () => {
    // "é" is bytes C3 A9 = byte-level characters "Ã" "©", two tokens here
    const ids = [id('hello'), id('Ã'), id('©'), id('Ġworld')];
    expect(tokenizer.decode(ids)).toBe('helloé world');
    const stream = new StreamDecoder(tokenizer);
    expect(ids.map((i) => stream.push(i))).toEqual(['hello', '', 'é', ' world']);
    expect(stream.flush()).toBe('');
  });

  test('createTokenizer reads the files', async () => {
    const built = await createTokenizer({ kind: 'tokenizer.json', path: tokenizerPath, configPath });
    expect(built.encode('hello')).toEqual([BOS, id('hello')]);
  });

  test('bad files → TOKENIZER_INVALID naming the file and the problem', () => {
    const broken = write('broken.json', '{"model": ');
    expect(() => loadHfTokenizer(broken)).toThrow(expect.objectContaining({ code: 'TOKENIZER_INVALID', message: expect.stringMatching(/broken\.json: not valid JSON/) }));
    const noModel = write('no-model.json', { added_tokens: [] });
    expect(() => loadHfTokenizer(noModel)).toThrow(expect.objectContaining({ code: 'TOKENIZER_INVALID', message: expect.stringMatching(/no-model\.json: has no "model"/) }));
    const unknownModel = write('unknown-model.json', { ...TOKENIZER_JSON, model: { type: 'NoSuchModel', vocab: {} } });
    expect(() => loadHfTokenizer(unknownModel)).toThrow(expect.objectContaining({ code: 'TOKENIZER_INVALID', message: expect.stringMatching(/unknown-model\.json: .*NoSuchModel/) }));
    const unknownPre = write('unknown-pre.json', { ...TOKENIZER_JSON, pre_tokenizer: { type: 'Nope' } });
    expect(() => loadHfTokenizer(unknownPre)).toThrow(expect.objectContaining({ code: 'TOKENIZER_INVALID' }));
    const array = write('array.json', '[1, 2]');
    expect(() => loadHfTokenizer(array)).toThrow(expect.objectContaining({ code: 'TOKENIZER_INVALID' }));
    expect(() => loadHfTokenizer(join(dir, 'missing.json'))).toThrow(expect.objectContaining({ code: 'MODEL_NOT_FOUND' }));
  });
});
