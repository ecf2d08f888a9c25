import { describe, expect, it } from 'vitest';
import { continuePrompt, instructionPrompt, rewritePrompt, tailForContext } from './prompts.ts';

describe('writer prompts', () => {
  it('keeps short text whole and cuts long text at a word boundary to fit the context', () => {
    expect(tailForContext('short text', 2048, 256)).toBe('short text');
    const long = Array.from({ length: 500 }, (_, i) => `word${i}`).join(' ');
    const tail = tailForContext(long, 256, 128); // (256 − 128) · 3 = 384 characters at most
    expect(tail.length).toBeLessThanOrEqual(384);
    expect(long.endsWith(tail)).toBe(true);
    expect(tail.startsWith('word')).toBe(true);
    expect(tailForContext(long, null, 128)).toBe(long);
  });

  it('continue is a raw text prompt; rewrite uses chat messages when the model has a template', () => {
    expect(continuePrompt('Once', 2048, 64)).toEqual({ text: 'Once' });
    expect(rewritePrompt('x', true)).toMatchObject({ messages: [{ role: 'system' }, { role: 'user', content: 'x' }] });
    expect(rewritePrompt('x', false)).toEqual({ text: expect.stringContaining('Passage:\nx') });
  });

  it('an instruction without text before the cursor is sent as is', () => {
    expect(instructionPrompt('Write a haiku', '', 2048, 64)).toMatchObject({ messages: [{ role: 'system' }, { role: 'user', content: 'Write a haiku' }] });
  });
});
