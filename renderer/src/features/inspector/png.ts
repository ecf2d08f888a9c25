// A PNG of the inspector's current view: every canvas in the view (token map, charts, A/B strip)
// drawn at its on-screen size, one under the other, under a title line. Text outside the canvases
// (tables, the token text) is not part of it; the tables' numbers are in the JSON lines export.

export class PngError extends Error {
  readonly code = 'INSPECTOR_PNG';
}

export async function viewPng(root: HTMLElement | null, title: string): Promise<Blob> {
  const canvases = root ? [...root.querySelectorAll('canvas')].filter((c) => c.width > 0 && c.height > 0 && c.getBoundingClientRect().width > 0) : [];
  if (canvases.length === 0) throw new PngError('this view draws nothing to save (no chart on screen)');
  const ratio = Math.max(1, Math.round(globalThis.devicePixelRatio || 1));
  const pad = 12;
  const titleHeight = 28;
  const sizes = canvases.map((c) => {
    const r = c.getBoundingClientRect();
    return { w: Math.round(r.width), h: Math.round(r.height) };
  });
  const width = Math.max(...sizes.map((s) => s.w)) + 2 * pad;
  const height = titleHeight + sizes.reduce((a, s) => a + s.h + pad, 0) + pad;
  const out = document.createElement('canvas');
  out.width = width * ratio;
  out.height = height * ratio;
  const ctx = out.getContext('2d');
  if (!ctx) throw new PngError('this browser gives no 2-D canvas');
  ctx.scale(ratio, ratio);
  ctx.fillStyle = '#16161c';
  ctx.fillRect(0, 0, width, height);
  ctx.fillStyle = '#e8e8ee';
  ctx.font = '14px sans-serif';
  ctx.fillText(title, pad, 19);
  ctx.imageSmoothingEnabled = false; // heatmap cells stay cells
  let y = titleHeight;
  canvases.forEach((c, i) => {
    const s = sizes[i]!;
    ctx.drawImage(c, pad, y, s.w, s.h);
    y += s.h + pad;
  });
  return new Promise((resolve, reject) => out.toBlob((blob) => (blob ? resolve(blob) : reject(new PngError('the canvas could not be encoded'))), 'image/png'));
}
