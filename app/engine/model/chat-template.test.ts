// Real-world chat templates (ChatML, Llama 3, Mistral [INST]) rendered to exact strings.
import { readFileSync } from 'node:fs';
import { describe, expect, test } from 'vitest';
import { haveSharedModel, loadReferenceRuns, STORIES_260K } from '../../../test/support/models.ts';
import { parseGguf } from './gguf/reader.ts';
import { createGgufTokenizer } from './tokenizer/tokenizer.ts';
import { ChatTemplate, PLAIN_CHAT_TEMPLATE } from './chat-template.ts';
import type { ChatMessage } from './chat-template.ts';

const CHATML =
  "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

// Meta-Llama-3-8B-Instruct's tokenizer_config.json chat_template
const LLAMA3 =
  "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

// Mistral-7B-Instruct-v0.1's template
const MISTRAL =
  "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}";

const CONVERSATION: ChatMessage[] = [
  { role: 'user', content: 'Write a story.' },
  { role: 'assistant', content: 'Once upon a time...' },
  { role: 'user', content: 'Longer, please.' },
];

describe('ChatTemplate', () => {
  test('ChatML', () => {
    const template = new ChatTemplate(CHATML, { bos: '<s>', eos: '<|im_end|>' });
    const messages: ChatMessage[] = [{ role: 'system', content: 'You are a writer.' }, ...CONVERSATION];
    expect(template.render(messages)).toBe(
      '<|im_start|>system\nYou are a writer.<|im_end|>\n' +
        '<|im_start|>user\nWrite a story.<|im_end|>\n' +
        '<|im_start|>assistant\nOnce upon a time...<|im_end|>\n' +
        '<|im_start|>user\nLonger, please.<|im_end|>\n' +
        '<|im_start|>assistant\n',
    );
    expect(template.render(messages.slice(0, 2), { addGenerationPrompt: false })).toBe(
      '<|im_start|>system\nYou are a writer.<|im_end|>\n<|im_start|>user\nWrite a story.<|im_end|>\n',
    );
    expect(template.isFallback).toBe(false);
    expect(template.encodeOptionsFor(template.render(messages))).toEqual({ parseSpecial: true, addSpecial: true });
  });

  test('Llama 3: bos_token first, contents trimmed', () => {
    const template = new ChatTemplate(LLAMA3, { bos: '<|begin_of_text|>', eos: '<|eot_id|>' });
    const rendered = template.render([{ role: 'system', content: '  Be brief. ' }, { role: 'user', content: 'Hi!\n' }]);
    expect(rendered).toBe(
      '<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>' +
        '<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>' +
        '<|start_header_id|>assistant<|end_header_id|>\n\n',
    );
    // the template wrote BOS: the tokenizer must not add another
    expect(template.encodeOptionsFor(rendered)).toEqual({ parseSpecial: true, addSpecial: false });
  });

  test('Mistral [INST]: eos after assistant turns, roles must alternate', () => {
    const template = new ChatTemplate(MISTRAL, { bos: '<s>', eos: '</s>' });
    expect(template.render(CONVERSATION)).toBe('<s>[INST] Write a story. [/INST]Once upon a time...</s>[INST] Longer, please. [/INST]');
    expect(() => template.render([{ role: 'assistant', content: 'first' }])).toThrow(
      expect.objectContaining({ code: 'CHAT_TEMPLATE_INVALID', message: expect.stringContaining('Conversation roles must alternate') }),
    );
    expect(() => template.render([{ role: 'system', content: 'x' }])).toThrow(expect.objectContaining({ code: 'CHAT_TEMPLATE_INVALID' }));
  });

  test('extra variables reach the template; tools is none', () => {
    const template = new ChatTemplate("{% if tools is none %}no tools{% endif %} {{ date_string }}");
    expect(template.render([], { variables: { date_string: '26 Jul 2024' } })).toBe('no tools 26 Jul 2024');
  });

  test('a template that does not parse → CHAT_TEMPLATE_INVALID with the Jinja message', () => {
    let caught: unknown;
    try {
      new ChatTemplate('{% for message in messages %}{{ message.content }}');
    } catch (error) {
      caught = error;
    }
    expect(caught).toMatchObject({ code: 'CHAT_TEMPLATE_INVALID', details: { stage: 'parse' } });
    expect((caught as Error).message).toMatch(/^chat template does not parse: .+/);
    expect(() => new ChatTemplate('{{ unclosed ')).toThrow(expect.objectContaining({ code: 'CHAT_TEMPLATE_INVALID' }));
  });

  test('no template → the plain fallback: contents joined by a blank line, nothing added', () => {
    for (const missing of [undefined, '', '   ']) {
      const template = new ChatTemplate(missing, { bos: '<s>' });
      expect(template.isFallback).toBe(true);
      expect(template.source).toBe(PLAIN_CHAT_TEMPLATE);
      expect(template.render([{ role: 'user', content: 'Once upon a time' }])).toBe('Once upon a time');
      expect(template.render([{ role: 'system', content: 'A tale.' }, ...CONVERSATION])).toBe(
        'A tale.\n\nWrite a story.\n\nOnce upon a time...\n\nLonger, please.',
      );
      // user text stays text and the tokenizer adds BOS
      expect(template.encodeOptionsFor('Once upon a time')).toEqual({ parseSpecial: false, addSpecial: true });
    }
  });
});

describe.skipIf(!haveSharedModel())('ChatTemplate with the stories260K tokenizer', () => {
  test('the fallback prompt tokenizes to the reference prompt ids', () => {
    const tokenizer = createGgufTokenizer(parseGguf(new Uint8Array(readFileSync(STORIES_260K)), 'stories260K.gguf').metadata);
    const template = ChatTemplate.forTokenizer(undefined, tokenizer);
    expect(template.tokens).toEqual({ bos: '<s>', eos: '</s>' });
    for (const run of loadReferenceRuns()) {
      const rendered = template.render([{ role: 'user', content: run.prompt }]);
      expect(tokenizer.encode(rendered, template.encodeOptionsFor(rendered))).toEqual(run.promptIds);
    }
  });
});
