// Documents (autosaved drafts): one JSON file per document, <dataDir>/documents/<id>.json,
// each replaced atomically. Ids come through DocumentIdSchema ([a-z0-9-]{1,64}), so an id can
// never name a path outside the folder; the check is repeated here for direct callers.
// A missing document is a BAD_ARGUMENT with details.notFound (the HTTP route answers 404).
import { readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { DocumentIdSchema, DocumentSchema, type Document, type DocumentSummary } from '../../common/app-api.ts';
import { LonghandError } from '../../common/errors.ts';
import { writeFileAtomic } from './atomic-write.ts';

const FILE = /^([a-z0-9-]{1,64})\.json$/;

export function countWords(text: string): number {
  const matches = text.match(/\S+/g);
  return matches ? matches.length : 0;
}

export class DocumentStore {
  readonly dir: string;

  constructor(dataDir: string) {
    this.dir = join(dataDir, 'documents');
  }

  /** Every readable document, newest first. Unreadable or invalid files are skipped, never fatal. */
  async list(): Promise<DocumentSummary[]> {
    let names: string[];
    try {
      names = await readdir(this.dir);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw error;
    }
    const summaries: DocumentSummary[] = [];
    for (const name of names) {
      const match = FILE.exec(name);
      if (!match) continue; // temp files (".<id>.json.<pid>-<rand>.tmp") and anything else
      const doc = await this.read(match[1]!).catch(() => undefined);
      if (doc) summaries.push({ id: doc.id, title: doc.title, updatedAt: doc.updatedAt, words: countWords(doc.text) });
    }
    return summaries.sort((a, b) => b.updatedAt - a.updatedAt || a.id.localeCompare(b.id));
  }

  async get(id: string): Promise<Document> {
    const doc = await this.read(checkId(id));
    if (!doc) throw notFound(id);
    return doc;
  }

  async save(document: Document): Promise<{ updatedAt: number }> {
    const doc = DocumentSchema.parse(document);
    await writeFileAtomic(this.path(doc.id), JSON.stringify(doc));
    return { updatedAt: doc.updatedAt };
  }

  async delete(id: string): Promise<{ deleted: boolean }> {
    const path = this.path(checkId(id));
    try {
      await rm(path);
      return { deleted: true };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return { deleted: false };
      throw error;
    }
  }

  private path(id: string): string {
    return join(this.dir, `${id}.json`);
  }

  /** The document, or undefined when the file does not exist; a corrupt file is an error naming it. */
  private async read(id: string): Promise<Document | undefined> {
    let text: string;
    try {
      text = await readFile(this.path(id), 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw error;
    }
    let parsed: ReturnType<typeof DocumentSchema.safeParse>;
    try {
      parsed = DocumentSchema.safeParse(JSON.parse(text));
    } catch (error) {
      throw new LonghandError('INTERNAL', `document '${id}' is not valid JSON: ${(error as Error).message}`, { id, file: this.path(id) });
    }
    if (!parsed.success || parsed.data.id !== id) throw new LonghandError('INTERNAL', `document '${id}' does not match the document schema`, { id, file: this.path(id) });
    return parsed.data;
  }
}

function checkId(id: string): string {
  const parsed = DocumentIdSchema.safeParse(id);
  if (!parsed.success) throw new LonghandError('BAD_ARGUMENT', `'${id.slice(0, 80)}' is not a document id (1-64 of a-z, 0-9 and -)`, { id: id.slice(0, 80) });
  return parsed.data;
}

export function notFound(id: string): LonghandError {
  return new LonghandError('BAD_ARGUMENT', `there is no document with id '${id}'`, { id, notFound: true });
}

export function isNotFound(error: unknown): boolean {
  return error instanceof LonghandError && error.details.notFound === true;
}
