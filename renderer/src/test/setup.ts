// Renderer tests: unmount between tests (no globals mode, so Testing Library cannot do it itself).
import { cleanup } from '@testing-library/react';
import { afterEach } from 'vitest';

afterEach(() => cleanup());
