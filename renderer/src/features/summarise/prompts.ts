// The summarising instructions. Prompts are built as token ids ([prefix] + document tokens +
// [suffix]) so the budget arithmetic in plan.ts is exact: the document is tokenized once and cut
// at token boundaries, never re-tokenized after a cut.

export const SUMMARY_PREFIX = 'Summarise the following text. Keep its main points, names and numbers, and write plain prose.\n\nText:\n';
export const PART_PREFIX = 'The following is one part of a longer document. Summarise this part. Keep its main points, names and numbers, and write plain prose.\n\nText:\n';
export const COMBINE_PREFIX = 'The following are summaries of consecutive parts of one document, in order. Combine them into one coherent summary of the whole document, in plain prose.\n\nSummaries:\n';
export const SUFFIX = '\n\nSummary:\n';
/** Between the head and the tail of a document whose middle was cut. */
export const CUT_MARKER = '\n\n[…]\n\n';
/** Between part summaries when they are combined. */
export const SEPARATOR = '\n\n';
