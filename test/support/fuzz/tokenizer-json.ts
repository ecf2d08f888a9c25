// Fuzz target: tokenizer.json (+ tokenizer_config.json) through parseHfTokenizer
// (app/engine/model/tokenizer/hf-tokenizer-json.ts, @huggingface/tokenizers underneath).
// Seeds: the fixtures' llama-2 style BPE with byte fallback, and small hand-made byte-level BPE,
// WordPiece and Unigram files. A loaded tokenizer is also used (encode with and without special
// tokens, decode, token pieces), since a file that loads but breaks at encode time breaks
// generation. Expected: 'ok' or LonghandError; anything else is a crash.
import { LonghandError } from '../../../app/common/errors.ts';
import { parseHfTokenizer } from '../../../app/engine/model/tokenizer/hf-tokenizer-json.ts';
import { buildVocab, hfTokenizerConfig, hfTokenizerJson } from '../../fixtures/vocab.ts';
import { flipBytes, int, pick, shuffleSpan, splice, truncate, type FuzzTarget, type Mutant, type Random } from './core.ts';

export interface TokenizerFiles {
  tokenizer: string;
  config: string;
}

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

function byteLevelBpe(): TokenizerFiles {
  const vocab = ['<unk>', 'h', 'e', 'l', 'o', 'Ġ', 'w', 'r', 'd', 'he', 'll', 'hell', 'hello', 'Ġw', 'or', 'Ġwor', 'ld', 'Ġworld', '<|begin_of_text|>', '<|eot_id|>'];
  const tokenizer = {
    version: '1.0',
    added_tokens: [
      { id: 18, content: '<|begin_of_text|>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true },
      { id: 19, content: '<|eot_id|>', single_word: false, lstrip: false, rstrip: false, normalized: false, special: true },
    ],
    normalizer: null,
    pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'Split', pattern: { Regex: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+" }, behavior: 'Isolated', invert: false }, { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] },
    post_processor: { type: 'TemplateProcessing', single: [{ SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }], pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }], special_tokens: { '<|begin_of_text|>': { id: '<|begin_of_text|>', ids: [18], tokens: ['<|begin_of_text|>'] } } },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: true, vocab: Object.fromEntries(vocab.map((t, i) => [t, i])), merges: [['h', 'e'], ['l', 'l'], ['he', 'll'], ['hell', 'o'], ['Ġ', 'w'], ['o', 'r'], ['Ġw', 'or'], ['l', 'd'], ['Ġwor', 'ld']] },
  };
  return { tokenizer: JSON.stringify(tokenizer), config: JSON.stringify({ bos_token: '<|begin_of_text|>', eos_token: { content: '<|eot_id|>' } }) };
}

function wordPiece(): TokenizerFiles {
  const vocab = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', 'hello', 'world', 'wo', '##rld', 'h', '##e', '##l', '##o', ',', '!', 'a', '##b'];
  const tokenizer = {
    version: '1.0',
    added_tokens: ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'].map((content, id) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
    normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
    pre_tokenizer: { type: 'BertPreTokenizer' },
    post_processor: { type: 'TemplateProcessing', single: [{ SpecialToken: { id: '[CLS]', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '[SEP]', type_id: 0 } }], pair: [{ SpecialToken: { id: '[CLS]', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '[SEP]', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }, { SpecialToken: { id: '[SEP]', type_id: 1 } }], special_tokens: { '[CLS]': { id: '[CLS]', ids: [2], tokens: ['[CLS]'] }, '[SEP]': { id: '[SEP]', ids: [3], tokens: ['[SEP]'] } } },
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    model: { type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##', max_input_chars_per_word: 100, vocab: Object.fromEntries(vocab.map((t, i) => [t, i])) },
  };
  return { tokenizer: JSON.stringify(tokenizer), config: JSON.stringify({ cls_token: '[CLS]', sep_token: '[SEP]', unk_token: '[UNK]', pad_token: '[PAD]' }) };
}

function unigram(): TokenizerFiles {
  const pieces: [string, number][] = [['<unk>', 0], ['<s>', 0], ['</s>', 0], ['▁', -2], ['▁hello', -3], ['▁world', -3.5], ['h', -5], ['e', -5], ['l', -5], ['o', -5], ['w', -5], ['r', -5], ['d', -5], ['▁he', -4], ['llo', -4.5], [',', -6], ['!', -6]];
  const tokenizer = {
    version: '1.0',
    added_tokens: ['<unk>', '<s>', '</s>'].map((content, id) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
    normalizer: { type: 'Sequence', normalizers: [{ type: 'NFKC' }, { type: 'Replace', pattern: { Regex: ' {2,}' }, content: ' ' }] },
    pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: true },
    post_processor: { type: 'TemplateProcessing', single: [{ Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '</s>', type_id: 0 } }], pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }], special_tokens: { '</s>': { id: '</s>', ids: [2], tokens: ['</s>'] } } },
    decoder: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'always', split: true },
    model: { type: 'Unigram', unk_id: 0, vocab: pieces, byte_fallback: false },
  };
  return { tokenizer: JSON.stringify(tokenizer), config: JSON.stringify({ bos_token: '<s>', eos_token: '</s>', unk_token: '<unk>' }) };
}

function fixtureLlama(): TokenizerFiles {
  const vocab = buildVocab(400, 1);
  return { tokenizer: JSON.stringify(hfTokenizerJson(vocab)), config: JSON.stringify(hfTokenizerConfig(vocab)) };
}

/** Every [path, value] in a JSON tree (objects and arrays), at most `limit` of them, sampled. */
function nodes(root: Json, random: Random, limit = 4000): { parent: Json[] | { [key: string]: Json }; key: string | number }[] {
  const out: { parent: Json[] | { [key: string]: Json }; key: string | number }[] = [];
  const stack: Json[] = [root];
  while (stack.length > 0 && out.length < limit) {
    const node = stack.pop()!;
    if (Array.isArray(node)) {
      node.forEach((child, i) => {
        out.push({ parent: node, key: i });
        if (typeof child === 'object' && child !== null && random() < 0.9) stack.push(child);
      });
    } else if (typeof node === 'object' && node !== null) {
      for (const [key, child] of Object.entries(node)) {
        out.push({ parent: node, key });
        if (typeof child === 'object' && child !== null && random() < 0.9) stack.push(child);
      }
    }
  }
  return out;
}

const WEIRD: Json[] = [null, 0, -1, 1.5, 2 ** 31, 2 ** 53, 1e308, -1e308, '', 'x', '<unk>', ' ', '\u0000', [], {}, true, false, [[['deep']]], { type: 'Sequence' }, { type: 'NoSuchThing' }, 'BPE', 'WordPiece', 'Unigram', 'WordLevel'];
const HUGE: Json[] = [2 ** 53, 2 ** 40, 2 ** 31, -(2 ** 31), 1e308, -1, 0.5, 4_194_304, 1e21];
const BAD_MERGES: Json[] = ['a', 'a b c', '', ' ', 'Ġ', ['a'], ['a', 'b', 'c'], [1, 2], 42, null, 'zz qq', 'h e', ['h', 'e'], '\u0000 \u0000'];

const DEEP = '\u0000deep\u0000';

/** Nested JSON text `depth` levels deep (built as text: JSON.stringify would overflow its stack). */
function deepText(depth: number, random: Random): string {
  const list = pick(random, ['normalizers', 'pretokenizers', 'decoders', 'processors']);
  switch (int(random, 3)) {
    case 0:
      return '['.repeat(depth) + ']'.repeat(depth);
    case 1:
      return `{"type":"Sequence","${list}":[`.repeat(depth) + '{"type":"Lowercase"}' + ']}'.repeat(depth);
    default:
      return '{"a":'.repeat(depth) + '"x"' + '}'.repeat(depth);
  }
}

type Structural = (root: { [key: string]: Json }, random: Random) => string;

const STRUCTURAL: Record<string, Structural> = {
  'drop a key': (root, random) => {
    const objects = nodes(root, random).filter((n) => !Array.isArray(n.parent));
    if (objects.length === 0) return 'nothing to drop';
    const { parent, key } = pick(random, objects);
    delete (parent as { [key: string]: Json })[key as string];
    return `dropped ${String(key)}`;
  },
  'wrong type': (root, random) => {
    const { parent, key } = pick(random, nodes(root, random));
    const value = pick(random, WEIRD);
    (parent as Record<string | number, Json>)[key] = value;
    return `${String(key)} = ${JSON.stringify(value)}`;
  },
  'huge number': (root, random) => {
    const numbers = nodes(root, random).filter((n) => typeof (n.parent as Record<string | number, Json>)[n.key] === 'number');
    if (numbers.length === 0) return 'no number';
    const { parent, key } = pick(random, numbers);
    const value = pick(random, HUGE);
    (parent as Record<string | number, Json>)[key] = value;
    return `number ${String(key)} = ${value}`;
  },
  'deep nesting': (root, random) => {
    // a placeholder here; mutate() puts the nested text in its place after stringifying
    const depth = pick(random, [50, 1_000, 10_000, 50_000]);
    const target = pick(random, ['normalizer', 'pre_tokenizer', 'decoder', 'post_processor', 'added_tokens', 'model']);
    if (target === 'model' && typeof root.model === 'object' && root.model !== null && !Array.isArray(root.model)) root.model.vocab = `${DEEP}${depth}`;
    else root[target] = `${DEEP}${depth}`;
    return `${target} nested ${depth} deep`;
  },
  'bad merges': (root, random) => {
    const model = root.model as { [key: string]: Json } | undefined;
    const merges = model?.merges;
    if (!Array.isArray(merges)) {
      if (model) model.merges = [pick(random, BAD_MERGES)];
      return 'merges added';
    }
    for (let n = 1 + int(random, 4); n > 0; n--) {
      const at = int(random, merges.length + 1);
      if (random() < 0.3 && merges.length > 0) merges.splice(at, 0, merges[int(random, merges.length)]!); // duplicate
      else merges.splice(at, random() < 0.5 ? 1 : 0, pick(random, BAD_MERGES));
    }
    return 'merges edited';
  },
  'vocab id out of range': (root, random) => {
    const model = root.model as { [key: string]: Json } | undefined;
    const vocab = model?.vocab;
    const value = pick(random, [...HUGE, -5, 'x', null, 3, 0]);
    if (Array.isArray(vocab)) {
      // Unigram: [piece, score] pairs; scores and pieces get the weird values
      const at = int(random, vocab.length);
      vocab[at] = random() < 0.5 ? [(vocab[at] as Json[] | undefined)?.[0] ?? 'x', value] : value;
      if (model) model.unk_id = pick(random, [...HUGE, -1, vocab.length, null]);
      return `unigram entry ${at} / unk_id`;
    }
    if (typeof vocab === 'object' && vocab !== null) {
      const keys = Object.keys(vocab);
      const key = keys.length > 0 && random() < 0.8 ? pick(random, keys) : `new-${int(random, 100)}`;
      vocab[key] = value;
      return `vocab[${JSON.stringify(key)}] = ${JSON.stringify(value)}`;
    }
    return 'no vocab';
  },
  'added token edits': (root, random) => {
    const added = Array.isArray(root.added_tokens) ? root.added_tokens : (root.added_tokens = []);
    const entry: { [key: string]: Json } = { id: pick(random, [...HUGE, 0, 1, 2, -1, 399, 400]), content: pick(random, ['', '<s>', '<unk>', 'hello', ' ', '\n', 'x'.repeat(1000)]), special: pick(random, [true, false, 'yes', null]) };
    if (random() < 0.3) delete entry[pick(random, ['id', 'content'])];
    added.splice(int(random, added.length + 1), 0, entry);
    return `added token ${JSON.stringify(entry).slice(0, 60)}`;
  },
  'model type': (root, random) => {
    const model = root.model as { [key: string]: Json } | undefined;
    if (model) model.type = pick(random, ['BPE', 'WordPiece', 'Unigram', 'WordLevel', 'bpe', '', null, 7]);
    return `model.type = ${JSON.stringify(model?.type)}`;
  },
  'config edits': () => '', // handled in mutate: edits tokenizer_config.json instead
};

const JSON_CHARS = '{}[],:"-.eE+0123456789 \\tnuf';

function duplicateKey(text: string, random: Random): Mutant<string> {
  // `"key": value` inserted right after an opening brace: JSON.parse keeps the later of two equal keys
  const braces: number[] = [];
  for (let i = text.indexOf('{'); i !== -1 && braces.length < 2000; i = text.indexOf('{', i + 1)) braces.push(i);
  const at = pick(random, braces) + 1;
  const key = pick(random, ['model', 'type', 'vocab', 'merges', 'added_tokens', 'id', 'content', 'normalizer', 'unk_token', 'pre_tokenizer', 'special_tokens', 'ids']);
  const value = JSON.stringify(pick(random, WEIRD));
  return { input: `${text.slice(0, at)}"${key}":${value},${text.slice(at)}`, what: `duplicate key ${key}=${value} at ${at}` };
}

export const tokenizerJsonTarget: FuzzTarget<TokenizerFiles> = {
  name: 'tokenizer.json',
  seeds: () => [
    { name: 'fixture llama-2 BPE (byte fallback)', input: fixtureLlama() },
    { name: 'byte-level BPE', input: byteLevelBpe() },
    { name: 'WordPiece', input: wordPiece() },
    { name: 'Unigram', input: unigram() },
  ],

  mutate(files, random) {
    const choice = int(random, 14);
    const text = files.tokenizer;
    if (choice === 0) return wrap(files, flipBytes(text, random));
    if (choice === 1) return wrap(files, truncate(text, random));
    if (choice === 2) return wrap(files, shuffleSpan(text, random));
    if (choice === 3) return wrap(files, splice(text, random, pick(random, [...JSON_CHARS]), 'JSON punctuation'));
    if (choice === 4) return wrap(files, duplicateKey(text, random));
    if (choice === 5) {
      const depth = pick(random, [1_000, 100_000, 1_000_000]);
      return wrap(files, splice(text, random, '['.repeat(depth), `${depth} open brackets`));
    }
    if (choice === 6) {
      // tokenizer_config.json: wrong types for the special tokens, or a broken file
      let config: { [key: string]: Json };
      try {
        config = JSON.parse(files.config) as { [key: string]: Json };
      } catch {
        config = {};
      }
      const key = pick(random, ['bos_token', 'eos_token', 'unk_token', 'pad_token', 'added_tokens_decoder', 'model_max_length']);
      config[key] = pick(random, [...WEIRD, { content: 7 }, { content: '<s>' }, { content: null }]);
      const configText = random() < 0.2 ? JSON.stringify(config).slice(0, int(random, 40)) : JSON.stringify(config);
      return { input: { tokenizer: text, config: configText }, what: `config ${key} = ${JSON.stringify(config[key]).slice(0, 40)}` };
    }
    let root: { [key: string]: Json };
    try {
      root = JSON.parse(text) as { [key: string]: Json };
    } catch {
      return wrap(files, flipBytes(text, random)); // a corpus entry that is no longer JSON
    }
    if (typeof root !== 'object' || root === null || Array.isArray(root)) return wrap(files, truncate(text, random));
    const names = Object.keys(STRUCTURAL).filter((name) => name !== 'config edits');
    const steps: string[] = [];
    for (let n = 1 + (random() < 0.3 ? int(random, 3) : 0); n > 0; n--) {
      const name = pick(random, names);
      steps.push(`${name}: ${STRUCTURAL[name]!(root, random)}`);
    }
    let text2: string;
    try {
      text2 = JSON.stringify(root);
    } catch {
      return wrap(files, truncate(text, random)); // a corpus entry nested too deep to stringify
    }
    const json = text2.replace(/"\\u0000deep\\u0000(\d+)"/g, (_, depth: string) => deepText(Number(depth), random));
    return { input: { tokenizer: json, config: files.config }, what: steps.join('; ') };
  },

  exercise(files) {
    try {
      const tokenizer = parseHfTokenizer(files.tokenizer, files.config, 'tokenizer.json');
      for (const parseSpecial of [false, true]) {
        const ids = tokenizer.encode('Hello world, héllo <s>[CLS]<|eot_id|> 123 ɸ🙂', { parseSpecial });
        for (const id of ids) if (!Number.isInteger(id)) throw new Error(`encode produced a non-integer id ${String(id)}`);
        // ids outside the vocabulary must be refused by decode, with a typed error
        try {
          tokenizer.decode(ids, { skipSpecial: !parseSpecial });
        } catch (error) {
          if (!(error instanceof LonghandError)) throw error;
        }
      }
      if (tokenizer.vocabSize > 0) tokenizer.tokenPiece(tokenizer.vocabSize - 1);
      return 'ok';
    } catch (error) {
      if (error instanceof LonghandError) return `${error.code}: ${problemClass(error.message)}`;
      throw error;
    }
  },
};

function wrap(files: TokenizerFiles, mutant: Mutant<string>): Mutant<TokenizerFiles> {
  return { input: { tokenizer: mutant.input, config: files.config }, what: mutant.what };
}

/** The kind of problem a message names, without its particulars (names, numbers, quotes). */
export function problemClass(message: string): string {
  return message
    .replace(/^[^:]*\.json: /, '')
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, 'Q')
    .replace(/\(.*$/, '')
    .replace(/\d+(\.\d+)?(e[+-]?\d+)?/gi, 'N')
    .split(/[:;]/)[0]!
    .trim()
    .slice(0, 60);
}
