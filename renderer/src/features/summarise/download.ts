// Saving a file from the renderer alone: a Blob behind an object URL and a download link.
// No file system access is asked of the app; the browser (or Electron's download handler) asks
// the user where to put it.

export function downloadText(filename: string, text: string, type = 'text/plain;charset=utf-8'): void {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const link = document.createElement('a');
  link.href = url;
  link.download = filename;
  link.rel = 'noopener';
  link.style.display = 'none';
  document.body.append(link);
  try {
    link.click();
  } finally {
    link.remove();
    // Give the download a moment to start before the URL goes away.
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  }
}

/** A file name from a document name: letters, digits, dot, dash and underscore only. */
export function safeFileName(name: string, fallback = 'summary'): string {
  const cleaned = name.replace(/\.[^.]+$/, '').replace(/[^\p{L}\p{N}._-]+/gu, '-').replace(/^-+|-+$/g, '').slice(0, 80);
  return cleaned || fallback;
}
