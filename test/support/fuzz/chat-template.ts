// Fuzz target: chat templates through ChatTemplate (app/engine/model/chat-template.ts, rendered by
// @huggingface/jinja inside the limits of chat-template-guard.ts). Seeds: the fixtures' ChatML
// template, the plain fallback and well-known shapes written here (llama-2, llama-3, gemma,
// mistral). Mutations: byte flips, token splices, unbalanced blocks, and hostile snippets —
// runaway loops, recursion, exponential strings, attribute access on undefined, calls of things a
// sandbox must not reach. Expected: 'ok' or LonghandError CHAT_TEMPLATE_INVALID; anything else is
// a crash, and a case over the hang limit is a hang.
import { LonghandError } from '../../../app/common/errors.ts';
import { ChatTemplate, PLAIN_CHAT_TEMPLATE, type ChatMessage } from '../../../app/engine/model/chat-template.ts';
import { CHATML_TEMPLATE } from '../../fixtures/vocab.ts';
import { flipBytes, int, pick, shuffleSpan, splice, truncate, type FuzzTarget, type Mutant } from './core.ts';

export const LLAMA2_TEMPLATE =
  "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}" +
  "{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}" +
  "{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}" +
  "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";

export const LLAMA3_TEMPLATE =
  "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}" +
  "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

export const GEMMA_TEMPLATE =
  "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set first_user_prefix = messages[0]['content'] + '\\n\\n' %}{% set loop_messages = messages[1:] %}{% else %}{% set first_user_prefix = '' %}{% set loop_messages = messages %}{% endif %}" +
  "{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}" +
  "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}" +
  "{{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else '') }}{{ message['content'] | trim }}{{ '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}";

export const MISTRAL_TOOLS_TEMPLATE =
  "{%- set ns = namespace(system='', found=false) %}{%- for message in messages %}{%- if message.role == 'system' %}{%- set ns.system = ns.system ~ message.content ~ '\\n' %}{%- set ns.found = true %}{%- endif %}{%- endfor %}" +
  "{{- bos_token }}{%- if tools is not none %}[AVAILABLE_TOOLS]{{ tools | tojson(indent=2) }}[/AVAILABLE_TOOLS]{%- endif %}" +
  "{%- for message in messages | rejectattr('role', 'equalto', 'system') %}{%- if message.role == 'user' %}{{- '[INST] ' }}{%- if loop.first and ns.found %}{{- ns.system | trim | indent(2) }}{{- '\\n\\n' }}{%- endif %}{{- message.content }}{{- '[/INST]' }}" +
  "{%- elif message.role == 'assistant' %}{{- message.content | replace('\\n\\n', '\\n') }}{{- eos_token }}{%- endif %}{%- endfor %}";

/** A conversation that every seed template accepts (system first, then alternating turns). */
export const FUZZ_MESSAGES: ChatMessage[] = [
  { role: 'system', content: 'You write long text.' },
  { role: 'user', content: 'Begin a story about the sea.\nTwo lines.' },
  { role: 'assistant', content: 'The boats left before dawn.' },
  { role: 'user', content: 'Go on {{ not a template }} {% raw %}' },
];

/** Snippets a hostile or broken template might contain. */
export const HOSTILE_SNIPPETS = [
  '{% for x in range(10**9) %}x{% endfor %}',
  '{% for x in range(0, 10**12, 1) %}{% endfor %}',
  '{% for x in range(100000) %}{% for y in range(100000) %}{{ x }}{% endfor %}{% endfor %}',
  '{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}',
  '{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(40) }}',
  "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
  "{% set ns = namespace(a=[1, 2]) %}{% for i in range(64) %}{% set ns.a = ns.a + ns.a %}{% endfor %}{{ ns.a | length }}",
  "{{ 'x' * 1000000000 }}",
  "{{ ('x' + 'y') * 10**9 }}",
  "{{ 'a\\nb' | indent(1000000000) }}",
  '{{ messages | tojson(indent=100000000) }}',
  "{{ messages[0].content | indent(200) | indent(200) | indent(200) }}",
  '{{ undefined_thing.attr.more }}',
  '{{ messages[99].content.upper() }}',
  '{{ none.x }}',
  '{{ messages.constructor }}',
  "{{ messages.constructor.constructor('return process')() }}",
  "{{ range.constructor('return process')() }}",
  "{{ ''.__class__.__mro__[1].__subclasses__() }}",
  "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
  '{{ self._TemplateReference__context }}',
  '{{ lipsum.__globals__ }}',
  "{{ messages[0]['__proto__'] }}",
  "{{ messages | map(attribute='__proto__') | list }}",
  '{{ config.items() }}',
  "{% import 'os' as os %}",
  "{% include '/etc/passwd' %}",
  "{% extends 'base.html' %}",
  "{{ raise_exception('boom') }}",
  '{{ strftime_now(none) }}',
  "{{ strftime_now('%Y-%m-%d') }}",
  '{{ [1, 2] | join(none) }}',
  '{% for a, b in messages %}{% endfor %}',
  '{{ loop.cycle() }}',
  '{{ 1 / 0 }}',
  '{{ 10 ** 400 }}',
  '{{ -1 ** 0.5 }}',
  '{% set x = x %}{{ x.x.x }}',
  '{{ messages | selectattr("role", "equalto") | list }}',
];

/** Budgets for fuzzing: the defaults' shape, smaller, so runaway cases end in well under a second. */
export const FUZZ_LIMITS = { maxSteps: 100_000, maxMs: 800 };

const TOKENS = ['{{', '}}', '{%', '%}', '{#', '#}', '{%-', '-%}', 'endif', 'endfor', 'endmacro', 'else', 'elif', 'if', 'for', 'in', 'not', 'is', '|', '(', ')', '[', ']', '.', ',', '~', '+', '*', '**', '=', '==', 'messages', 'message', 'loop', 'ns', 'range', 'raw', 'endraw', '"', "'", '\\', '\n', ' ', 'none', 'true'];
const UNBALANCED = ['{% if true %}', '{% endif %}', '{% endfor %}', '{% for m in messages %}', '{% macro m() %}', '{% endmacro %}', '{{', '}}', '{% raw %}', '{#', '{% set x %}', '{% else %}', '{% filter upper %}', '{% call m() %}'];

export const chatTemplateTarget: FuzzTarget<string> = {
  name: 'chat template',
  seeds: () => [
    { name: 'fixture ChatML', input: CHATML_TEMPLATE },
    { name: 'plain fallback', input: PLAIN_CHAT_TEMPLATE },
    { name: 'llama-2', input: LLAMA2_TEMPLATE },
    { name: 'llama-3', input: LLAMA3_TEMPLATE },
    { name: 'gemma', input: GEMMA_TEMPLATE },
    { name: 'mistral with tools', input: MISTRAL_TOOLS_TEMPLATE },
  ],

  mutate(text, random): Mutant<string> {
    switch (int(random, 8)) {
      case 0:
        return flipBytes(text, random);
      case 1:
        return truncate(text, random);
      case 2:
        return shuffleSpan(text, random);
      case 3: {
        let out: Mutant<string> = { input: text, what: 'tokens' };
        for (let n = 1 + int(random, 3); n > 0; n--) out = splice(out.input, random, pick(random, TOKENS), `token splice`);
        return out;
      }
      case 4:
        return splice(text, random, pick(random, UNBALANCED), 'unbalanced block');
      case 5: {
        // drop a whole tag, usually a closing one
        const tags = [...text.matchAll(/\{%-?\s*(end\w+|else|elif[^%]*|if[^%]*|for[^%]*)\s*-?%\}/g)];
        if (tags.length === 0) return truncate(text, random);
        const tag = pick(random, tags);
        return { input: text.slice(0, tag.index) + text.slice(tag.index + tag[0].length), what: `dropped ${tag[0]}` };
      }
      default: {
        const snippet = pick(random, HOSTILE_SNIPPETS);
        // at the start or end (so it runs), or anywhere (so it breaks something)
        const at = random() < 0.7 ? (random() < 0.5 ? 0 : text.length) : int(random, text.length + 1);
        return { input: text.slice(0, at) + snippet + text.slice(at), what: `hostile ${snippet} at ${at}` };
      }
    }
  },

  exercise(text) {
    try {
      const template = new ChatTemplate(text, { bos: '<s>', eos: '</s>' });
      // smaller budgets keep hostile cases short; two renders stay under the hang limit (2 s)
      const output = template.render(FUZZ_MESSAGES, { limits: FUZZ_LIMITS });
      if (typeof output !== 'string') throw new Error(`render returned ${typeof output}`);
      template.render(FUZZ_MESSAGES.slice(1, 2), { addGenerationPrompt: false, limits: FUZZ_LIMITS });
      return 'ok';
    } catch (error) {
      if (error instanceof LonghandError) {
        const details = error.details as { stage?: string; limit?: string };
        return `${error.code}: ${details.stage ?? '?'}${details.limit ? ` limit ${details.limit}` : ''}`;
      }
      throw error;
    }
  },
};
