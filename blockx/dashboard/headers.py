"""The security headers of every dashboard response.

The page runs only the package's own script and style (CSP ``default-src
'self'``, no inline script or style, no eval), is never framed (frame-ancestors
'none' and X-Frame-Options DENY against clickjacking the cancel button), is not
sniffed into another type, sends no Referer off the page, and opens no
cross-origin window. API answers are never cached (they hold one identity's
tasks); under TLS, HSTS keeps the browser on https."""
from __future__ import annotations

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")

BASE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
}
HSTS = "max-age=31536000"


def security_headers(path: str, *, tls: bool) -> dict[str, str]:
    """The headers for a response to ``path``."""
    out = dict(BASE_HEADERS)
    if not path.startswith("/static/"):
        out["Cache-Control"] = "no-store"
    if tls:
        out["Strict-Transport-Security"] = HSTS
    return out
