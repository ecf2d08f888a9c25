// Chat templates: the Jinja text a model ships (GGUF tokenizer.chat_template, or chat_template in
// tokenizer_config.json) rendered with @huggingface/jinja the way transformers'
// apply_chat_template does: messages, add_generation_prompt, the special-token strings, tools and
// documents as none. A model without a template gets PLAIN_CHAT_TEMPLATE (see there).
import { Template } from '@huggingface/jinja';
import { LonghandError } from '../../common/errors.ts';
import { defaultRenderLimits, renderWithLimits, type RenderLimits } from './chat-template-guard.ts';
import type { EncodeOptions, Tokenizer } from './tokenizer/tokenizer.ts';

export type ChatRole = 'system' | 'user' | 'assistant';

export interface ChatMessage {
  role: ChatRole;
  content: string;
}

/** The special-token strings a template may print ({{ bos_token }} ...). */
export interface ChatTemplateTokens {
  bos?: string;
  eos?: string;
  unk?: string;
  pad?: string;
}

export interface RenderOptions {
  /** End with the opening of the assistant's turn (what generation continues). Default true. */
  addGenerationPrompt?: boolean;
  /** More variables for templates that read them (e.g. date_string, enable_thinking). */
  variables?: Record<string, unknown>;
  /** Override the render's limits (see chat-template-guard.ts; defaults scale with the input). */
  limits?: Partial<RenderLimits>;
}

/** Longer templates than any model ships (the largest known are tens of KiB). */
export const MAX_TEMPLATE_CHARS = 1 << 20;

/**
 * The template for models that carry none (base models such as stories260K): the messages'
 * contents, whatever their role, joined by a blank line, with nothing added for the generation
 * prompt and no special tokens, so a single user message renders as itself and the model simply
 * continues the text. (llama.cpp would fall back to ChatML instead; ChatML's markers are not in a
 * base model's vocabulary and only confuse it.)
 */
export const PLAIN_CHAT_TEMPLATE = "{% for message in messages %}{% if not loop.first %}{{ '\\n\\n' }}{% endif %}{{ message.content }}{% endfor %}";

export class ChatTemplate {
  /** The Jinja text in use (PLAIN_CHAT_TEMPLATE for a model without one). */
  readonly source: string;
  /** True when the model had no template and PLAIN_CHAT_TEMPLATE is used. */
  readonly isFallback: boolean;
  readonly tokens: Readonly<ChatTemplateTokens>;
  private readonly template: Template;

  /**
   * `text` undefined or blank → PLAIN_CHAT_TEMPLATE. A template that does not parse throws
   * LonghandError CHAT_TEMPLATE_INVALID with the Jinja message.
   */
  constructor(text: string | undefined, tokens: ChatTemplateTokens = {}) {
    this.isFallback = text === undefined || text.trim() === '';
    this.source = this.isFallback ? PLAIN_CHAT_TEMPLATE : (text as string);
    this.tokens = { ...tokens };
    if (this.source.length > MAX_TEMPLATE_CHARS) {
      throw new LonghandError('CHAT_TEMPLATE_INVALID', `chat template is ${this.source.length} characters long, more than the ${MAX_TEMPLATE_CHARS} Longhand accepts`, { stage: 'parse', length: this.source.length, max: MAX_TEMPLATE_CHARS });
    }
    try {
      this.template = new Template(this.source);
    } catch (error) {
      throw new LonghandError('CHAT_TEMPLATE_INVALID', `chat template does not parse: ${(error as Error).message}`, { stage: 'parse' }, { cause: error });
    }
  }

  /** A model's template with bos_token/eos_token taken from its tokenizer's special tokens. */
  static forTokenizer(text: string | undefined, tokenizer: Tokenizer): ChatTemplate {
    const piece = (id: number | undefined): string | undefined => (id === undefined ? undefined : tokenizer.tokenPiece(id));
    return new ChatTemplate(text, { bos: piece(tokenizer.bos), eos: piece(tokenizer.eos) });
  }

  /**
   * The prompt text for these messages. A template that fails while rendering (an unknown filter,
   * raise_exception such as "roles must alternate") throws CHAT_TEMPLATE_INVALID with its message;
   * so does one that crosses a render limit (runaway loops, recursion, output: chat-template-guard.ts).
   */
  render(messages: readonly ChatMessage[], options: RenderOptions = {}): string {
    const variables: Record<string, unknown> = {
      tools: null,
      documents: null,
      ...options.variables,
      messages: messages.map((message) => ({ role: message.role, content: message.content })),
      add_generation_prompt: options.addGenerationPrompt ?? true,
      bos_token: this.tokens.bos ?? '',
      eos_token: this.tokens.eos ?? '',
      unk_token: this.tokens.unk ?? '',
      pad_token: this.tokens.pad ?? '',
    };
    const inputChars = messages.reduce((sum, message) => sum + message.content.length, 0);
    const limits = { ...defaultRenderLimits(inputChars, messages.length), ...options.limits };
    try {
      return renderWithLimits(this.template.parsed, variables, limits);
    } catch (error) {
      if (error instanceof LonghandError) throw error;
      throw new LonghandError('CHAT_TEMPLATE_INVALID', `chat template failed to render: ${error instanceof Error ? error.message : String(error)}`, { stage: 'render' }, { cause: error });
    }
  }

  /**
   * How to tokenize a rendered prompt: special-token text in it is meant (parseSpecial), and the
   * tokenizer adds BOS only when the template did not already write it.
   */
  encodeOptionsFor(rendered: string): EncodeOptions {
    const bos = this.tokens.bos;
    return { parseSpecial: !this.isFallback, addSpecial: !(bos !== undefined && bos !== '' && rendered.startsWith(bos)) };
  }
}
