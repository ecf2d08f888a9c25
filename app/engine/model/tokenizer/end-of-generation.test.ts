// The end-of-generation rules both vocabulary formats share, with llama.cpp's two exceptions: in a
// vocabulary with gpt-oss's <|return|> and <|call|>, <|end|> does not stop; in one with Gemma 4's
// <|tool_response>, </s> is a normal token (the Gemma 4 case is held to llama.cpp itself in
// model/gemma4-chat.test.ts; gpt-oss's vocabulary is not here yet, so its rule is checked on ours).
import { describe, expect, test } from 'vitest';
import { END_OF_GENERATION_TEXTS, endOfGenerationExceptions } from './end-of-generation.ts';
import { createGgufTokenizer } from './tokenizer.ts';

const BYTES = Array.from({ length: 256 }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);

/** A small SentencePiece vocabulary with `extra` as control tokens after the bytes. */
function vocabWith(extra: readonly string[]): Map<string, unknown> {
  const tokens = ['<unk>', '<s>', '<eos>', ...BYTES, '\u2581', 'a', ...extra];
  const types = tokens.map((t, i) => (i === 0 ? 2 : i < 3 ? 3 : t.startsWith('<0x') ? 6 : extra.includes(t) ? 3 : 1));
  return new Map<string, unknown>([
    ['tokenizer.ggml.model', 'llama'],
    ['tokenizer.ggml.tokens', tokens],
    ['tokenizer.ggml.scores', Float32Array.from(tokens, (_, i) => -i)],
    ['tokenizer.ggml.token_type', Int32Array.from(types)],
    ['tokenizer.ggml.bos_token_id', 1],
    ['tokenizer.ggml.eos_token_id', 2],
    ['tokenizer.ggml.unknown_token_id', 0],
  ]);
}

function stops(extra: readonly string[]): string[] {
  const tokenizer = createGgufTokenizer(vocabWith(extra));
  return tokenizer.eosIds.map((id) => tokenizer.tokenPiece(id)).sort();
}

describe('end of generation', () => {
  test('every listed text in the vocabulary stops, besides EOS', () => {
    expect(stops(['<|im_end|>', '<|endoftext|>', '<turn|>', 'plain'])).toEqual(['<eos>', '<turn|>', '<|endoftext|>', '<|im_end|>'].sort());
    expect(END_OF_GENERATION_TEXTS.has('plain')).toBe(false);
  });

  test("gpt-oss: with <|return|> and <|call|>, <|end|> closes a message but generation goes on", () => {
    expect(stops(['<|return|>', '<|call|>', '<|end|>'])).toEqual(['<eos>', '<|call|>', '<|return|>'].sort());
    expect(stops(['<|calls|>', '<|flush|>', '<|end|>'])).toEqual(['<eos>', '<|calls|>', '<|flush|>'].sort());
    // Phi's <|end|> without them still ends the turn
    expect(stops(['<|end|>', '<|endoftext|>'])).toEqual(['<eos>', '<|end|>', '<|endoftext|>'].sort());
    const tokenizer = createGgufTokenizer(vocabWith(['<|return|>', '<|call|>', '<|end|>']));
    // retyped user-defined, as llama.cpp does: still one token in text, and rendered when decoded
    const end = tokenizer.tokenId('<|end|>')!;
    expect(tokenizer.encode('a<|end|>a', { addSpecial: false, parseSpecial: true })).toContain(end);
    expect(tokenizer.decode([end])).toBe('<|end|>');
  });

  test('Gemma 4: with <|tool_response>, </s> is text', () => {
    expect(stops(['<|tool_response>', '</s>'])).toEqual(['<eos>', '<|tool_response>'].sort());
    expect(stops(['</s>'])).toEqual(['</s>', '<eos>'].sort());
    const tokenizer = createGgufTokenizer(vocabWith(['<|tool_response>', '</s>']));
    expect(tokenizer.isSpecial(tokenizer.tokenId('</s>')!)).toBe(false);
    expect(endOfGenerationExceptions((text) => text === '</s>').size).toBe(0);
  });
});
