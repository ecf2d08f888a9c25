// gpt-oss's chat: the model's own harmony template (test/fixtures/families/gpt-oss-chat-template.jinja,
// openai/gpt-oss-120b's, as llama.cpp vendors it: a system header with the model identity, the
// knowledge cutoff, the current date through strftime_now and the reasoning effort, developer
// instructions, channels, tool namespaces) rendered by @huggingface/jinja exactly as Python's jinja2
// renders it in the environment transformers' apply_chat_template builds (trim_blocks, lstrip_blocks,
// loopcontrols, raise_exception, tojson, strftime_now); the rendered prompts tokenized as llama.cpp
// (node-llama-cpp 3.21.1) tokenizes them over the o200k_harmony vocabulary, each harmony marker one
// control token; and the end of generation as llama.cpp decides it: <|return|> and <|call|> stop,
// <|end|> (which closes every message, the analysis channel's included) does not.
//
// Python with jinja2 is the outside reference (.ci/run installs Debian's python3-jinja2 where it is
// missing); without it the rendering comparison skips with a message, and fails under CI=true.
import { spawnSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { gptOssGgufFixture } from '../../../test/fixtures/families/gpt-oss.ts';
import { ChatTemplate, type ChatMessage } from './chat-template.ts';
import { loadGgufModel } from './gguf/gguf-model.ts';
import { createGgufTokenizer, type Tokenizer } from './tokenizer/tokenizer.ts';

interface Conversation {
  name: string;
  messages: ChatMessage[];
  addGenerationPrompt: boolean;
  variables: Record<string, unknown>;
}

const CONVERSATIONS: Conversation[] = [
  { name: 'one user turn', messages: [{ role: 'user', content: 'Hi' }], addGenerationPrompt: true, variables: {} },
  {
    name: 'developer instructions and several turns',
    messages: [
      { role: 'system', content: 'Answer in one line.' },
      { role: 'user', content: 'Hi there' },
      { role: 'assistant', content: 'Hello! How can I help?' },
      { role: 'user', content: 'Write a poem.' },
    ],
    addGenerationPrompt: true,
    variables: {},
  },
  { name: 'reasoning effort high, a model identity', messages: [{ role: 'user', content: 'Why is the sky blue?' }], addGenerationPrompt: true, variables: { reasoning_effort: 'high', model_identity: 'You are Longhand.' } },
  { name: 'builtin python tool', messages: [{ role: 'user', content: 'Sum 2+2 in code.' }], addGenerationPrompt: true, variables: { builtin_tools: ['python'] } },
  { name: 'no generation prompt, ending on the assistant', messages: [{ role: 'user', content: 'Say yes.' }, { role: 'assistant', content: 'Yes.' }], addGenerationPrompt: false, variables: {} },
  {
    name: 'Unicode, code, braces and blank lines in the text',
    messages: [{ role: 'user', content: 'Füße 😀 {{ not a tag }} {% raw %}\n\n\n    def f(x):\n\treturn x  \n<|start|> and <|end|> as text' }],
    addGenerationPrompt: true,
    variables: {},
  },
];

/** The harmony markers the template writes. */
const HARMONY_TOKENS = ['<|start|>', '<|end|>', '<|message|>', '<|channel|>', '<|constrain|>', '<|return|>', '<|call|>'] as const;

/** What transformers' apply_chat_template gives, by Python's jinja2 in transformers' environment. */
const PYTHON_RENDER = String.raw`
import json, sys
from datetime import datetime
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
def raise_exception(message):
    raise Exception(message)
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
def strftime_now(format):
    return datetime.now().strftime(format)
job = json.load(sys.stdin)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters['tojson'] = tojson
env.globals['raise_exception'] = raise_exception
env.globals['strftime_now'] = strftime_now
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
  console.warn(`gpt-oss-chat.test.ts: no python3 with jinja2 here, the rendering comparison is skipped (apt-get install python3-jinja2)${requirePython ? '; CI=true: failing' : ''}`);
}

describe('gpt-oss chat: harmony template, tokens and stops against the references', () => {
  let tokenizer: Tokenizer;
  let templateText: string;
  let llama: {
    tokenize(text: string, special?: boolean): readonly number[];
    isEogToken(token: number): boolean;
    dispose(): Promise<void>;
  };

  beforeAll(async () => {
    const path = gptOssGgufFixture('F32');
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

  test("the file carries gpt-oss's harmony template: a system header, then the turns, the generation prompt opens the assistant's turn", () => {
    const rendered = render(CONVERSATIONS[0]!);
    expect(rendered).toMatch(/^<\|start\|>system<\|message\|>You are ChatGPT, a large language model trained by OpenAI\.\nKnowledge cutoff: 2024-06\nCurrent date: \d{4}-\d{2}-\d{2}\n\nReasoning: medium\n\n# Valid channels: analysis, commentary, final\. Channel must be included for every message\.<\|end\|>/);
    expect(rendered.endsWith('<|start|>user<|message|>Hi<|end|><|start|>assistant')).toBe(true);
    expect(render(CONVERSATIONS[2]!)).toContain('You are Longhand.\n');
    expect(render(CONVERSATIONS[2]!)).toContain('Reasoning: high');
    // a system message becomes the developer's instructions; an earlier answer is the final channel
    const several = render(CONVERSATIONS[1]!);
    expect(several).toContain('<|start|>developer<|message|># Instructions\n\nAnswer in one line.');
    expect(several).toContain('<|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|end|>');
  });

  test.skipIf(python === undefined && !requirePython)('renders as Python jinja2 does in transformers environment, conversation for conversation', () => {
    expect(python, 'python3 with jinja2 (apt-get install python3-jinja2)').toBeDefined();
    const template = ChatTemplate.forTokenizer(templateText, tokenizer);
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
    console.log(`gpt-oss chat template: ${CONVERSATIONS.length} conversations, ${ours.reduce((n, s) => n + s.length, 0)} characters, identical to Python jinja2 ${spawnSync(python!, ['-c', 'import jinja2; print(jinja2.__version__)'], { encoding: 'utf8' }).stdout.trim()}`);
  });

  test('the rendered prompts tokenize as llama.cpp tokenizes them, each harmony marker one token', () => {
    const template = ChatTemplate.forTokenizer(templateText, tokenizer);
    for (const conversation of CONVERSATIONS) {
      const rendered = render(conversation);
      const ours = tokenizer.encode(rendered, template.encodeOptionsFor(rendered));
      const theirs = [...llama.tokenize(rendered, true)].map(Number);
      expect(ours, conversation.name).toEqual(theirs);
      const starts = ours.filter((id) => id === tokenizer.tokenId('<|start|>')).length;
      expect(starts, conversation.name).toBe(rendered.split('<|start|>').length - 1);
      // no BOS: the template opens with <|start|> and the vocabulary asks for none
      expect(ours[0]).toBe(tokenizer.tokenId('<|start|>'));
    }
    for (const text of HARMONY_TOKENS) expect(tokenizer.tokenId(text), text).toBeDefined();
  });

  test('<|return|> and <|call|> end generation in both engines; <|end|>, <|start|> and the channel markers do not', () => {
    const id = (text: string): number => tokenizer.tokenId(text)!;
    for (const text of ['<|return|>', '<|call|>']) {
      expect(tokenizer.isEndOfGeneration(id(text)), text).toBe(true);
      expect(llama.isEogToken(id(text)), text).toBe(true);
    }
    for (const text of ['<|end|>', '<|start|>', '<|channel|>', '<|message|>', '<|constrain|>']) {
      expect(tokenizer.isEndOfGeneration(id(text)), text).toBe(false);
      expect(llama.isEogToken(id(text)), text).toBe(false);
    }
    // the same set both ways round, over every token of the vocabulary that is not a plain BPE piece
    const ours = new Set(tokenizer.eosIds);
    const disagreements: string[] = [];
    let checked = 0;
    for (let i = 199998; i < tokenizer.vocabSize; i++) {
      checked++;
      if (ours.has(i) !== llama.isEogToken(i)) disagreements.push(`${i} ${tokenizer.tokenPiece(i)}: ours ${ours.has(i)}, llama.cpp ${llama.isEogToken(i)}`);
    }
    const eog = [...ours].sort((a, b) => a - b);
    console.log(`gpt-oss end of generation: ${eog.map((i) => `${i} ${tokenizer.tokenPiece(i)}`).join(', ')}, as llama.cpp over the ${checked} ids past the BPE ranks`);
    expect(disagreements).toEqual([]);
  });
});
