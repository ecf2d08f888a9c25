// Native dialogs: choose a model (file or Hugging Face folder) and export a document. The page
// only states the intent; main shows the dialog and, for exports, writes the file itself.
import type { BrowserWindow, Dialog } from 'electron';
import { rename, writeFile } from 'node:fs/promises';
import { extname } from 'node:path';
import type { ExportRequest, ExportResult } from './ipc-channels.ts';

export const MODEL_FILTERS = [
  { name: 'Models (GGUF, safetensors)', extensions: ['gguf', 'safetensors'] },
  { name: 'All files', extensions: ['*'] },
];

export async function chooseModel(dialog: Pick<Dialog, 'showOpenDialog'>, window: BrowserWindow | undefined): Promise<string | null> {
  const options: Electron.OpenDialogOptions = {
    title: 'Open Model',
    buttonLabel: 'Open',
    // A Hugging Face model is a folder (config.json + *.safetensors); a GGUF is one file.
    properties: process.platform === 'darwin' ? ['openFile', 'openDirectory'] : ['openFile'],
    filters: MODEL_FILTERS,
  };
  const result = window ? await dialog.showOpenDialog(window, options) : await dialog.showOpenDialog(options);
  return result.canceled ? null : (result.filePaths[0] ?? null);
}

/** A file name from the document title: no path separators or characters Windows refuses. */
export function exportFileName(title: string, format: ExportRequest['format']): string {
  // eslint-disable-next-line no-control-regex -- control characters are exactly what must go
  const base = title.replace(/[\\/:*?"<>|\u0000-\u001f]/g, ' ').replace(/\s+/g, ' ').trim().slice(0, 120) || 'Untitled';
  return `${base}.${format}`;
}

export async function exportDocument(dialog: Pick<Dialog, 'showSaveDialog'>, window: BrowserWindow | undefined, request: ExportRequest, defaultDir: string): Promise<ExportResult> {
  const options: Electron.SaveDialogOptions = {
    title: 'Save As',
    defaultPath: `${defaultDir}/${exportFileName(request.title, request.format)}`,
    filters: request.format === 'md' ? [{ name: 'Markdown', extensions: ['md'] }] : [{ name: 'Text', extensions: ['txt'] }],
    properties: ['createDirectory', 'showOverwriteConfirmation'],
  };
  const result = window ? await dialog.showSaveDialog(window, options) : await dialog.showSaveDialog(options);
  if (result.canceled || !result.filePath) return { saved: false };
  const path = extname(result.filePath) === '' ? `${result.filePath}.${request.format}` : result.filePath;
  const temp = `${path}.${process.pid}.tmp`;
  await writeFile(temp, request.text, 'utf8');
  await rename(temp, path);
  return { saved: true, path };
}
