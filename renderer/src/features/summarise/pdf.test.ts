import { describe, expect, it } from 'vitest';
import { textOfItems } from './pdf.ts';
import { kindOfFile } from './source.ts';

describe('PDF text', () => {
  it('joins pdf.js text items, breaking lines where they end', () => {
    // What pdf.js 5 answers for a two-line page (checked against a generated PDF).
    expect(textOfItems([{ str: 'Hello PDF world', hasEOL: true }, { str: 'Second line', hasEOL: false }, { hasEOL: true }])).toBe('Hello PDF world\nSecond line');
  });

  it('knows which files it can open', () => {
    expect(kindOfFile('Report.PDF')).toBe('pdf');
    expect(kindOfFile('notes.md')).toBe('md');
    expect(kindOfFile('notes', 'text/plain')).toBe('txt');
    expect(kindOfFile('photo.png', 'image/png')).toBeNull();
  });
});
