// The one way model output (and any other untrusted text) reaches the screen: as a React text
// node inside a pre-wrapped block. Never dangerouslySetInnerHTML, never linkified, never parsed
// as Markdown; `<script>`, `<img onerror>` and `javascript:` stay inert characters.
import type { CSSProperties } from 'react';

// C0 controls other than tab and newline (and DEL) render as nothing useful and can confuse a
// terminal a user pastes into; drop them. Everything else is kept as the model wrote it.
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/g;

export function sanitiseText(text: string): string {
  return text.replace(/\r\n?/g, '\n').replace(CONTROL, '');
}

export interface SafeTextProps {
  text: string;
  className?: string;
  style?: CSSProperties;
  /** Accessible name of the block (e.g. "Suggestion"). */
  label?: string;
  /** Polite live region for streamed text. */
  live?: boolean;
}

export function SafeText({ text, className, style, label, live }: SafeTextProps) {
  return (
    <div
      className={className ? `safe-text ${className}` : 'safe-text'}
      style={style}
      aria-label={label}
      role={label ? 'region' : undefined}
      aria-live={live ? 'polite' : undefined}
      data-testid="safe-text"
    >
      {sanitiseText(text)}
    </div>
  );
}
