// Opening a document to summarise: .txt and .md as UTF-8 text, .pdf through pdf.js.

export type SourceKind = 'paste' | 'txt' | 'md' | 'pdf';

export const ACCEPT = '.txt,.md,.markdown,.pdf,text/plain,text/markdown,application/pdf';

export function kindOfFile(name: string, type = ''): Exclude<SourceKind, 'paste'> | null {
  const lower = name.toLowerCase();
  if (lower.endsWith('.pdf') || type === 'application/pdf') return 'pdf';
  if (lower.endsWith('.md') || lower.endsWith('.markdown') || type === 'text/markdown') return 'md';
  if (lower.endsWith('.txt') || type === 'text/plain') return 'txt';
  return null;
}

/** Reads `file` as text; rejects with a plain message for other kinds of file. */
export async function readSource(file: File, onProgress?: (message: string) => void): Promise<{ kind: Exclude<SourceKind, 'paste'>; text: string }> {
  const kind = kindOfFile(file.name, file.type);
  if (!kind) throw new Error(`${file.name} is not a .txt, .md or .pdf file.`);
  if (kind !== 'pdf') return { kind, text: await file.text() };
  const { pdfToText } = await import('./pdf.ts');
  const text = await pdfToText(await file.arrayBuffer(), (page, pages) => onProgress?.(`Reading page ${page} of ${pages}…`));
  if (!text.trim()) throw new Error(`${file.name} has no text layer (a scanned PDF?); nothing to summarise.`);
  return { kind, text };
}
