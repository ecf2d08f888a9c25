// Who may talk to the server. It listens on 127.0.0.1 only, and a local port is reachable by
// every web page the user opens, so each request must prove three things:
//   Host    is 127.0.0.1:PORT or localhost:PORT (a DNS-rebinding page sends its own name),
//   Origin  when present, is http://127.0.0.1:PORT or http://localhost:PORT (cross-site pages),
//   token   the per-run secret: `Authorization: Bearer T`, or the cookie that `GET /?token=T`
//           sets for the page's own later requests (HttpOnly, SameSite=Strict).
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

/** A fresh secret per run: 24 random bytes, base64url (32 characters). */
export function newToken(): string {
  return randomBytes(24).toString('base64url');
}

/** Cookies are not scoped by port, so the name carries it: two servers do not overwrite each other. */
export function cookieName(port: number): string {
  return `longhand_token_${port}`;
}

export function sessionCookie(port: number, token: string): string {
  return `${cookieName(port)}=${token}; Path=/; HttpOnly; SameSite=Strict`;
}

export type Refusal = { status: 401 | 403; message: string; code: string };

export class Gate {
  private readonly tokenDigest: Buffer;
  private readonly hosts: Set<string>;
  private readonly origins: Set<string>;

  constructor(
    readonly port: number,
    readonly token: string,
  ) {
    this.tokenDigest = digest(token);
    this.hosts = new Set([`127.0.0.1:${port}`, `localhost:${port}`]);
    this.origins = new Set([`http://127.0.0.1:${port}`, `http://localhost:${port}`]);
  }

  /** Host and Origin checks (403), before anything else is looked at. */
  checkSite(req: IncomingMessage): Refusal | undefined {
    const host = req.headers.host?.toLowerCase();
    if (!host || !this.hosts.has(host)) return { status: 403, code: 'bad_host', message: `Host '${req.headers.host ?? ''}' is not allowed: use 127.0.0.1:${this.port} or localhost:${this.port}` };
    const origin = req.headers.origin;
    if (origin !== undefined && !this.origins.has(origin.toLowerCase())) return { status: 403, code: 'bad_origin', message: `Origin '${origin}' is not allowed` };
    return undefined;
  }

  /**
   * The token check (401). `allowQuery` is true only for the page itself (`GET /`): the token
   * in its URL is how a browser first gets in; everything else uses the header or the cookie.
   * Returns how the request proved itself.
   */
  checkToken(req: IncomingMessage, url: URL, allowQuery: boolean): 'header' | 'cookie' | 'query' | Refusal {
    const auth = req.headers.authorization;
    if (auth !== undefined) {
      const match = /^Bearer\s+(\S+)\s*$/i.exec(auth);
      if (match && this.matches(match[1]!)) return 'header';
      return { status: 401, code: 'invalid_api_key', message: 'the bearer token is wrong' };
    }
    const cookie = readCookie(req.headers.cookie, cookieName(this.port));
    if (cookie !== undefined && this.matches(cookie)) return 'cookie';
    const query = url.searchParams.get('token');
    if (allowQuery && query !== null && this.matches(query)) return 'query';
    return { status: 401, code: 'invalid_api_key', message: 'a token is required: send Authorization: Bearer <token> (the token is in the URL that `longhand serve` printed)' };
  }

  private matches(candidate: string): boolean {
    return timingSafeEqual(digest(candidate), this.tokenDigest);
  }
}

function digest(value: string): Buffer {
  return createHash('sha256').update(value).digest();
}

export function readCookie(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}
