// Every IPC channel between the main process and the preload, in one place. Both sides import
// this file (the preload bundles it), so a name can never drift. It imports nothing: the
// sandboxed preload may only require 'electron'.

/** The renderer's one origin (a registered standard + secure scheme; see app-protocol.ts). */
export const APP_SCHEME = 'app';
export const APP_HOST = 'longhand';
export const APP_ORIGIN = `${APP_SCHEME}://${APP_HOST}`;
export const APP_ENTRY_URL = `${APP_ORIGIN}/index.html`;

export const IPC = {
  /** renderer → main (send): "give this page an engine port". Answered on ENGINE_PORT. */
  engineConnect: 'engine:connect',
  /** main → renderer (postMessage with one MessagePort): the page's end of its engine channel. */
  enginePort: 'engine-port',
  /** main → renderer (send): EngineStatus changes (starting, ready, crashed, restarting). */
  engineStatus: 'engine:status',
  /** renderer → main (invoke, no payload): the user asked for an engine restart. */
  engineRestart: 'engine:restart',
  /** renderer → main (invoke, AppRequest): documents, settings, models, downloads. */
  appRequest: 'app:request',
  /** renderer → main (invoke, no payload): the open-model dialog; answers a path or null. */
  chooseModel: 'dialog:choose-model',
  /** renderer → main (invoke, ExportRequest): the save dialog, then main writes the file. */
  exportDocument: 'dialog:export-document',
  /** main → renderer (send, MenuCommand): a menu item the page acts on. */
  menuCommand: 'menu:command',
} as const;

export type IpcChannel = (typeof IPC)[keyof typeof IPC];

/** What crosses an invoke: never a thrown Error (Electron would flatten its code into text). */
export type IpcResult<T> = { ok: true; value: T } | { ok: false; error: { code: string; message: string } };

/** Menu items the page handles. `open-model` carries the chosen file or folder. */
export type MenuCommand = { command: 'new-document' } | { command: 'save-as' } | { command: 'open-model'; path: string };

/** The document to write after the user picked a file in the save dialog. */
export interface ExportRequest {
  title: string;
  text: string;
  format: 'txt' | 'md';
}
export type ExportResult = { saved: true; path: string } | { saved: false };

/**
 * Desktop-only intents the preload adds to LonghandWindowApi (app/common/window-api.ts). They
 * belong in that contract; until they are moved there, the type lives here.
 */
export interface DesktopApiExtras {
  /** The open-model dialog (GGUF, safetensors, or a Hugging Face folder); null when cancelled. */
  chooseModel(): Promise<string | null>;
  /** The save dialog for an export; main writes the file (the page never touches the file system). */
  exportDocument(request: ExportRequest): Promise<ExportResult>;
  /** Menu commands (New Document, Save As…, Open Model…); returns an unsubscribe function. */
  onMenuCommand(listener: (command: MenuCommand) => void): () => void;
}
