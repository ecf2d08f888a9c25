// Entry: pick the bridge (Electron preload or browser mode), install the services, render.
import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import { App } from './App.tsx';
import { pickBridge } from './bridge/index.ts';
import { installServices } from './services.ts';
import './styles.css';

const api = pickBridge();
// Browser mode was opened as /?token=…: the server has set the cookie, so drop the token from
// the address bar (and from history) before anything else can read it.
if (api.host === 'browser' && new URLSearchParams(window.location.search).has('token')) {
  window.history.replaceState(null, '', window.location.pathname);
}
installServices(api);

const root = document.getElementById('root');
if (!root) throw new Error('index.html has no #root');
createRoot(root).render(
  <StrictMode>
    <App />
  </StrictMode>,
);
