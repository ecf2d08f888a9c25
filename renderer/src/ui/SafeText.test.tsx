import { render, screen } from '@testing-library/react';
import { describe, expect, it } from 'vitest';
import { SafeText, sanitiseText } from './SafeText.tsx';

describe('SafeText', () => {
  it('renders <img src=x onerror=alert(1)> as text and creates no <img>', () => {
    const { container } = render(<SafeText text={'<img src=x onerror=alert(1)>'} />);
    expect(container.querySelector('img')).toBeNull();
    expect(screen.getByTestId('safe-text').textContent).toBe('<img src=x onerror=alert(1)>');
    expect(screen.getByTestId('safe-text').children).toHaveLength(0);
  });

  it('keeps <script> and javascript: inert, and turns nothing into a link', () => {
    const text = '<script>window.pwned = true</script> see javascript:alert(1) and https://example.com <a href="javascript:x">x</a>';
    const { container } = render(<SafeText text={text} />);
    expect(container.querySelector('script')).toBeNull();
    expect(container.querySelector('a')).toBeNull();
    expect((window as unknown as { pwned?: boolean }).pwned).toBeUndefined();
    expect(container.textContent).toBe(text);
  });

  it('keeps newlines and tabs, drops other control characters', () => {
    expect(sanitiseText('a\r\nb\tc\u0000d\u001be\u007f')).toBe('a\nb\tcde');
  });
});
