// Where a Hugging Face folder keeps its tokenizer and chat template.
//   tokenizer.json (required) + tokenizer_config.json (optional)
//   chat template: chat_template.jinja, else chat_template.json {chat_template}, else
//   tokenizer_config.json chat_template (a string, or [{name, template}] → the one named 'default')
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ModelFileError } from '../../../common/errors.ts';
import type { TokenizerSource } from '../types.ts';

export const TOKENIZER_FILE = 'tokenizer.json';
export const TOKENIZER_CONFIG_FILE = 'tokenizer_config.json';

export function findTokenizer(folder: string): TokenizerSource {
  const path = join(folder, TOKENIZER_FILE);
  if (!existsSync(path)) {
    throw new ModelFileError('MODEL_NOT_FOUND', TOKENIZER_FILE, `is missing from ${folder}; Longhand needs the fast-tokenizer file`, { folder });
  }
  const configPath = join(folder, TOKENIZER_CONFIG_FILE);
  return existsSync(configPath) ? { kind: 'tokenizer.json', path, configPath } : { kind: 'tokenizer.json', path };
}

export function findChatTemplate(folder: string): string | undefined {
  const jinja = join(folder, 'chat_template.jinja');
  if (existsSync(jinja)) return readFileSync(jinja, 'utf8');
  const json = join(folder, 'chat_template.json');
  if (existsSync(json)) return pickTemplate(readJsonObject(json, 'chat_template.json').chat_template, 'chat_template.json');
  const config = join(folder, TOKENIZER_CONFIG_FILE);
  if (existsSync(config)) return pickTemplate(readJsonObject(config, TOKENIZER_CONFIG_FILE).chat_template, TOKENIZER_CONFIG_FILE);
  return undefined;
}

/** A template string, or the 'default' entry of a named list; undefined when there is none. */
export function pickTemplate(value: unknown, file: string): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) {
    for (const item of value) {
      const entry = item as { name?: unknown; template?: unknown } | null;
      if (entry?.name === 'default') {
        if (typeof entry.template !== 'string') break;
        return entry.template;
      }
    }
    if (value.every((item) => typeof (item as { name?: unknown } | null)?.name === 'string')) return undefined; // named list without 'default'
  }
  throw new ModelFileError('CHAT_TEMPLATE_INVALID', file, 'chat_template must be a string or a list of {name, template}');
}

function readJsonObject(path: string, file: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(path, 'utf8'));
  } catch (error) {
    throw new ModelFileError('MODEL_BAD_HEADER', file, `is not valid JSON: ${(error as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new ModelFileError('MODEL_BAD_HEADER', file, 'must be a JSON object');
  return value as Record<string, unknown>;
}
