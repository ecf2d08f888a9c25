// The window's build: `npm run build:renderer` → renderer/dist (served by app/server in browser
// mode and loaded from app:// by Electron). Relative base so both carriers can host it anywhere.
import react from '@vitejs/plugin-react';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

const root = fileURLToPath(new URL('.', import.meta.url));

export default defineConfig({
  root,
  base: './',
  plugins: [react()],
  build: { outDir: 'dist', emptyOutDir: true, sourcemap: false, target: 'es2022' },
});
