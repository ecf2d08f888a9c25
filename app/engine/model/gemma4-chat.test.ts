// Gemma 4's chat: the model's own template (test/fixtures/families/gemma4-chat-template.jinja, 16 KB of
// macros, namespaces, dictsort and string filters) rendered by @huggingface/jinja exactly as Python's
// jinja2 renders it in the environment transformers' apply_chat_template builds (trim_blocks,
// lstrip_blocks, loopcontrols, raise_exception, tojson); the rendered prompts tokenized as llama.cpp
// (node-llama-cpp 3.21.1) tokenizes them, turn markers as single control tokens; and the turn's end
// (<turn|>) and <eos> stop generation in both engines.
//
// Python with jinja2 is the outside reference (.ci/run installs Debian's python3-jinja2 where it is
// missing); without it the rendering comparison skips with a message, and fails under CI=true.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, renameSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { GEMMA4_FIXTURE, GEMMA4_TEMPLATE_TOKENS, writeGemma4Gguf } from '../../../test/fixtures/families/gemma4.ts';
import { ChatTemplate, type ChatMessage } from './chat-template.ts';
import { loadGgufModel } from './gguf/gguf-model.ts';
import { createGgufTokenizer, type Tokenizer } from './tokenizer/tokenizer.ts';

const dir = join(tmpdir(), 'longhand-gemma4-fixtures');
mkdirSync(dir, { recursive: true });
// the smallest model of the fixture's pattern: only the vocabulary and the template matter here
const path = join(dir, 'gemma4-chat-tokenizer-v1.gguf');

interface Conversation {
  name: string;
  messages: ChatMessage[];
  addGenerationPrompt: boolean;
  variables: Record<string, unknown>;
}

const CONVERSATIONS: Conversation[] = [
  { name: 'one user turn', messages: [{ role: 'user', content: 'Hi' }], addGenerationPrompt: true, variables: {} },
  {
    name: 'system and several turns',
    messages: [
      { role: 'system', content: '  Be brief.\n' },
      { role: 'user', content: 'Hi there' },
      { role: 'assistant', content: 'Hello! How can I help?' },
      { role: 'user', content: 'Write a poem.' },
    ],
    addGenerationPrompt: true,
    variables: {},
  },
  { name: 'thinking on', messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Why is the sky blue?' }], addGenerationPrompt: true, variables: { enable_thinking: true } },
  { name: 'thinking on, no system turn', messages: [{ role: 'user', content: 'Sum 2+2.' }], addGenerationPrompt: true, variables: { enable_thinking: true } },
  {
    name: "an earlier answer's thought channel is stripped",
    messages: [
      { role: 'user', content: 'Name a colour.' },
      { role: 'assistant', content: '<|channel>thought\nSomething short.<channel|>Blue.' },
      { role: 'user', content: 'Another.' },
    ],
    addGenerationPrompt: true,
    variables: {},
  },
  { name: 'no generation prompt, ending on the model', messages: [{ role: 'user', content: 'Say yes.' }, { role: 'assistant', content: 'Yes.' }], addGenerationPrompt: false, variables: {} },
  {
    name: 'Unicode, code, braces and blank lines in the text',
    messages: [{ role: 'user', content: 'Füße 😀 {{ not a tag }} {% raw %}\n\n\n    def f(x):\n\treturn x  \n<bos> and <turn|> as text, <s>struck</s> too' }],
    addGenerationPrompt: true,
    variables: {},
  },
];

/** What transformers' apply_chat_template gives, by Python's jinja2 in transformers' environment. */
const PYTHON_RENDER = String.raw`
import json, sys
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
def raise_exception(message):
    raise Exception(message)
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
job = json.load(sys.stdin)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters['tojson'] = tojson
env.globals['raise_exception'] = raise_exception
template = env.from_string(job['template'])
out = [template.render(**c) for c in job['contexts']]
sys.stdout.write(json.dumps(out))
`;

/** A python3 that imports jinja2: PATH's first, then Debian's (where .ci/run installs python3-jinja2). */
function pythonWithJinja(): string | undefined {
  for (const python of ['python3', '/usr/bin/python3']) {
    const probe = spawnSync(python, ['-c', 'import jinja2'], { encoding: 'utf8' });
    if (probe.status === 0) return python;
  }
  return undefined;
}

const python = pythonWithJinja();
const requirePython = process.env.CI === 'true';
if (python === undefined) {
  console.warn(`gemma4-chat.test.ts: no python3 with jinja2 here, the rendering comparison is skipped (apt-get install python3-jinja2)${requirePython ? '; CI=true: failing' : ''}`);
}

describe('Gemma 4 chat: template, tokens and stops against the references', () => {
  let tokenizer: Tokenizer;
  let templateText: string;
  let llama: {
    tokenize(text: string, special?: boolean): readonly number[];
    isEogToken(token: number): boolean;
    dispose(): Promise<void>;
  };

  beforeAll(async () => {
    if (!existsSync(path)) {
      const tiny = { ...GEMMA4_FIXTURE, dim: 64, ffn: 64, headDimWindow: 16, headDimGlobal: 32, window: [true, false], sharedKvLayers: 0, kEqV: [] };
      writeGemma4Gguf(`${path}.part`, tiny, 'F32', 'gemma4-chat');
      renameSync(`${path}.part`, path);
    }
    const loaded = loadGgufModel(path);
    tokenizer = createGgufTokenizer((loaded.tokenizer as { metadata: ReadonlyMap<string, unknown> }).metadata);
    templateText = loaded.chatTemplate ?? '';
    loaded.close();
    const { getLlama } = await import('node-llama-cpp');
    const runtime = await getLlama({ gpu: false, build: 'never', logLevel: 'error' as never });
    llama = (await runtime.loadModel({ modelPath: path, vocabOnly: true })) as unknown as typeof llama;
  }, 120_000);
  afterAll(async () => {
    await llama?.dispose();
  });

  function render(conversation: Conversation): string {
    return ChatTemplate.forTokenizer(templateText, tokenizer).render(conversation.messages, { addGenerationPrompt: conversation.addGenerationPrompt, variables: conversation.variables });
  }

  test('the file carries Gemma 4 template; BOS from the tokenizer opens every prompt', () => {
    expect(templateText).toContain("'<|turn>' + role + '\\n'");
    for (const conversation of CONVERSATIONS) expect(render(conversation).startsWith('<bos>')).toBe(true);
    expect(render(CONVERSATIONS[0]!)).toBe('<bos><|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>');
  });

  test.skipIf(python === undefined && !requirePython)('renders as Python jinja2 does in transformers environment, conversation for conversation', () => {
    expect(python, 'python3 with jinja2 (apt-get install python3-jinja2)').toBeDefined();
    const template = ChatTemplate.forTokenizer(templateText, tokenizer);
    // the variables ChatTemplate.render sets, so both renderers see the same context
    const contexts = CONVERSATIONS.map((c) => ({
      tools: null,
      documents: null,
      ...c.variables,
      messages: c.messages,
      add_generation_prompt: c.addGenerationPrompt,
      bos_token: template.tokens.bos ?? '',
      eos_token: template.tokens.eos ?? '',
      unk_token: '',
      pad_token: '',
    }));
    const run = spawnSync(python!, ['-c', PYTHON_RENDER], { input: JSON.stringify({ template: templateText, contexts }), encoding: 'utf8', maxBuffer: 1 << 24 });
    expect(run.status, run.stderr).toBe(0);
    const theirs = JSON.parse(run.stdout) as string[];
    const ours = CONVERSATIONS.map(render);
    for (let i = 0; i < CONVERSATIONS.length; i++) expect(ours[i], CONVERSATIONS[i]!.name).toBe(theirs[i]);
    console.log(`gemma4 chat template: ${CONVERSATIONS.length} conversations, ${ours.reduce((n, s) => n + s.length, 0)} characters, identical to Python jinja2 ${spawnSync(python!, ['-c', 'import jinja2; print(jinja2.__version__)'], { encoding: 'utf8' }).stdout.trim()}`);
  });

  test('the rendered prompts tokenize as llama.cpp tokenizes them, each turn marker one control token', () => {
    const template = ChatTemplate.forTokenizer(templateText, tokenizer);
    const markers = new Map(GEMMA4_TEMPLATE_TOKENS.map((text) => [tokenizer.tokenId(text)!, text]));
    for (const conversation of CONVERSATIONS) {
      const rendered = render(conversation);
      const ours = tokenizer.encode(rendered, template.encodeOptionsFor(rendered));
      const theirs = [...llama.tokenize(rendered, true)].map(Number);
      expect(ours, conversation.name).toEqual(theirs);
      // every <|turn> in the text is one token, never spelled out in pieces
      const turns = ours.filter((id) => markers.get(id) === '<|turn>').length;
      expect(turns, conversation.name).toBe(rendered.split('<|turn>').length - 1);
    }
    for (const id of markers.keys()) expect(tokenizer.isSpecial(id)).toBe(true);
  });

  test("<turn|> and <eos> end generation in both engines; <|turn> and the channel markers do not", () => {
    const id = (text: string): number => tokenizer.tokenId(text)!;
    for (const text of ['<turn|>', '<eos>']) {
      expect(tokenizer.isEndOfGeneration(id(text)), text).toBe(true);
      expect(llama.isEogToken(id(text)), text).toBe(true);
    }
    for (const text of ['<|turn>', '<|channel>', '<channel|>', '<|think|>']) {
      expect(tokenizer.isEndOfGeneration(id(text)), text).toBe(false);
      expect(llama.isEogToken(id(text)), text).toBe(false);
    }
    // the same set both ways round, over every special token of the vocabulary
    const ours = new Set(tokenizer.eosIds);
    const disagreements: string[] = [];
    for (let i = 0; i < tokenizer.vocabSize; i++) {
      if (!tokenizer.isSpecial(i)) continue;
      if (ours.has(i) !== llama.isEogToken(i)) disagreements.push(`${i} ${tokenizer.tokenPiece(i)}: ours ${ours.has(i)}, llama.cpp ${llama.isEogToken(i)}`);
    }
    expect(disagreements).toEqual([]);
  });
});
