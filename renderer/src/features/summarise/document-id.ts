// Summarise has no saved document, so its document id (GenerateParams.document: the engine keeps a
// KV snapshot per id) is derived from the text: the same text summarised again, after a reload or
// another document in between, finds its snapshot. FNV-1a over the UTF-16 code units, 52 bits.

const FNV_OFFSET = 0xcbf29ce484222325n;
const FNV_PRIME = 0x100000001b3n;
const MASK = (1n << 64n) - 1n;

/** `s-` and 13 base-36 digits of the text's 64-bit FNV-1a hash (upper 52 bits kept), e.g. `s-0k3f…`. */
export function summaryDocumentId(text: string): string {
  let hash = FNV_OFFSET;
  for (let i = 0; i < text.length; i++) {
    hash ^= BigInt(text.charCodeAt(i));
    hash = (hash * FNV_PRIME) & MASK;
  }
  return `s-${(hash >> 12n).toString(36).padStart(11, '0')}`;
}

/** The id of part `index` (0-based) of a document summarised in parts: each part is its own prompt. */
export function partDocumentId(documentId: string, index: number): string {
  return `${documentId}-p${index + 1}`;
}
