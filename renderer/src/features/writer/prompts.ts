// What each writer action sends to the engine. Pure functions, tested on their own.
import type { ChatMessage, Prompt } from '../../../../app/common/protocol.ts';

/**
 * Rough characters per token for trimming a prompt to the context window before the engine
 * sees it (the engine still refuses one that does not fit, with CONTEXT_OVERFLOW). Three is
 * on the safe side for English with BPE vocabularies.
 */
const CHARS_PER_TOKEN = 3;

/** The end of `text` that should fit in `contextLength − reserveTokens`, cut at a word boundary. */
export function tailForContext(text: string, contextLength: number | null, reserveTokens: number): string {
  if (!contextLength) return text;
  const budget = Math.max(64, (contextLength - reserveTokens) * CHARS_PER_TOKEN);
  if (text.length <= budget) return text;
  const cut = text.slice(text.length - budget);
  const space = cut.search(/\s/);
  return space >= 0 && space < 64 ? cut.slice(space + 1) : cut;
}

export function continuePrompt(before: string, contextLength: number | null, maxTokens: number): Prompt {
  return { text: tailForContext(before, contextLength, maxTokens) };
}

const REWRITE_SYSTEM = 'You are an editor. Rewrite the passage the user gives you so it reads better, keeping its meaning, tone and language. Answer with the rewritten passage only.';

export function rewritePrompt(selection: string, chatTemplate: boolean): Prompt {
  if (chatTemplate) {
    return { messages: [{ role: 'system', content: REWRITE_SYSTEM }, { role: 'user', content: selection }] };
  }
  return { text: `Passage:\n${selection}\n\nThe same passage, rewritten to read better:\n` };
}

const INSTRUCTION_SYSTEM = 'You are a writing assistant. Follow the instruction and answer with the text to insert only: no preamble, no notes.';

export function instructionPrompt(instruction: string, before: string, contextLength: number | null, maxTokens: number): Prompt {
  const messages: ChatMessage[] = [{ role: 'system', content: INSTRUCTION_SYSTEM }];
  const context = tailForContext(before, contextLength, maxTokens + 256 + Math.ceil(instruction.length / CHARS_PER_TOKEN));
  messages.push({ role: 'user', content: context.trim() ? `The text so far:\n\n${context}\n\nInstruction: ${instruction}` : instruction });
  return { messages };
}
