"""A Content-Security-Policy on every response (Django 5.2 has none built in; 6.0 does).

crcr's pages load their scripts and styles from its own static files only: htmx, its
django-htmx helper and `static/crcr.js` (the keyboard handling), `static/crcr.css`. No
page has an inline `<script>`, `<style>` or `style=` attribute, and htmx's own indicator
style is turned off (`htmx-config` in `templates/base.html`; `crcr.css` carries it), so
`'self'` is enough and injected markup runs nothing. Charts are inline SVG; `data:`
images are allowed for the SVGs the admin and the API docs draw.
"""

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "object-src 'none'",
        "frame-ancestors 'none'",
        "form-action 'self'",
        "base-uri 'self'",
    ]
)


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", POLICY)
        return response
