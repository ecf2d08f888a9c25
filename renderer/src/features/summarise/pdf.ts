/// <reference types="vite/client" />
// PDF → plain text with pdfjs-dist, loaded only when a PDF is opened (its own chunk). The worker
// is a file of our own origin (Vite emits it; the CSP's script-src 'self' allows it), and
// isEvalSupported is off so pdf.js never builds functions from strings (no 'unsafe-eval').
import workerUrl from 'pdfjs-dist/build/pdf.worker.min.mjs?url';

interface TextLike {
  str?: unknown;
  hasEOL?: unknown;
}

/** The text of a PDF, page by page (pages separated by a blank line). */
export async function pdfToText(data: ArrayBuffer, onPage?: (page: number, pages: number) => void): Promise<string> {
  const pdfjs = await import('pdfjs-dist');
  if (!pdfjs.GlobalWorkerOptions.workerSrc) pdfjs.GlobalWorkerOptions.workerSrc = workerUrl;
  const task = pdfjs.getDocument({ data: new Uint8Array(data), isEvalSupported: false, useSystemFonts: false, stopAtErrors: false, verbosity: pdfjs.VerbosityLevel.ERRORS });
  const doc = await task.promise;
  try {
    const pages: string[] = [];
    for (let p = 1; p <= doc.numPages; p++) {
      const page = await doc.getPage(p);
      const content = await page.getTextContent();
      pages.push(textOfItems(content.items as TextLike[]));
      page.cleanup();
      onPage?.(p, doc.numPages);
    }
    return pages.join('\n\n').trim();
  } finally {
    void doc.destroy();
  }
}

/** Joins pdf.js text items: a line break where the item ends a line, else as written. */
export function textOfItems(items: readonly TextLike[]): string {
  let text = '';
  for (const item of items) {
    if (typeof item.str !== 'string') continue;
    text += item.str;
    if (item.hasEOL === true) text += '\n';
  }
  return text;
}
