"""The console's HTML: pages rendered on the server, every value escaped.

Everything shown comes from a model or a network peer (tool names, call ids, arguments,
outputs, reasons) and is treated as hostile: it passes through :func:`text` (``html.escape``,
quotes included) on its way into the page, invisible format characters (bidirectional
overrides, zero-width characters) are shown as ``\\uXXXX`` so a value cannot disguise
itself, and long values are cut with the number of characters left out. The pages carry no
inline script or style (the Content-Security-Policy forbids both): :data:`SCRIPT` and
:data:`STYLE` are served as files.
"""

from __future__ import annotations

import html
import json
import unicodedata
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Final

__all__ = ["SCRIPT", "STYLE", "page", "shown_json", "text", "when"]

#: Characters of one value shown before it is cut.
MAX_SHOWN: Final = 20_000


def text(value: object) -> str:
    """*value* as HTML text: escaped (quotes too), format characters made visible."""
    return html.escape(_visible(str(value)), quote=True)


def _visible(value: str) -> str:
    if value.isascii():
        return value
    return "".join(
        f"\\u{ord(ch):04x}" if unicodedata.category(ch) in ("Cf", "Cs", "Co", "Cn") else ch
        for ch in value
    )


def _cut(value: str, limit: int = MAX_SHOWN) -> str:
    if len(value) <= limit:
        return value
    return f"{value[:limit]}… ({len(value) - limit:,} more characters not shown)"


def shown_json(value: Any, limit: int = MAX_SHOWN) -> str:
    """*value* as indented JSON text, escaped for HTML (a value JSON cannot hold: its repr)."""
    try:
        rendered = json.dumps(value, indent=2, ensure_ascii=False, default=repr)
    except (ValueError, TypeError, RecursionError):
        rendered = repr(value)
    return text(_cut(rendered, limit))


def when(seconds: float | None) -> str:
    """A wall-clock time (``time.time()`` seconds) as UTC text, or a dash."""
    if seconds is None:
        return "—"
    try:
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return text(seconds)


def page(
    title: str,
    body: str,
    *,
    root: str,
    csrf: str | None,
    nav: str | None = None,
    live: bool = True,
) -> bytes:
    """A whole page: *title* (escaped here), *body* (HTML, escaped by its maker) inside
    ``<main id="live">`` (what the script refreshes), the navigation with *nav* current, and
    a logout button when *csrf* is given (a session someone signed in to)."""
    links = [("approvals", "Approvals"), ("conversations", "Conversations")]
    items = "".join(
        f'<a href="{text(root)}/{name}"{" aria-current=page" if name == nav else ""}>{label}</a>'
        for name, label in links
    )
    logout = (
        ""
        if csrf is None
        else f'<form method="post" action="{text(root)}/logout" class="logout">'
        f'<input type="hidden" name="csrf" value="{text(csrf)}">'
        '<button type="submit">Log out</button></form>'
    )
    events = f' data-events="{text(root)}/events"' if live else ""
    document = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{text(title)} · lionexec console</title>
<link rel="stylesheet" href="{text(root)}/static/console.css">
<script src="{text(root)}/static/console.js" defer></script>
</head><body{events}>
<header><strong>lionexec console</strong><nav>{items}</nav>{logout}
<span id="live-state" title="live updates">●</span></header>
<main id="live">{body}</main>
</body></html>
"""
    return document.encode()


def table(head: Iterable[str], rows: Iterable[Iterable[str]], *, empty: str) -> str:
    """A table of already escaped cells (*empty*, escaped here, when there is no row)."""
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    if not body:
        return f'<p class="empty">{text(empty)}</p>'
    header = "".join(f"<th>{text(cell)}</th>" for cell in head)
    return f"<table><thead><tr>{header}</tr></thead><tbody>{body}</tbody></table>"


def badge(word: str | None) -> str:
    """An outcome or state as a coloured word."""
    if word is None:
        return '<span class="badge">—</span>'
    return f'<span class="badge b-{text(word)}">{text(word)}</span>'


#: What every page loads: opens the event stream and, on any event, fetches the page again
#: and swaps its ``<main>`` in (not while a field of it is being typed in).
SCRIPT: Final = b"""'use strict';
(function () {
  var url = document.body.dataset.events, main = document.getElementById('live');
  var state = document.getElementById('live-state');
  if (!url || !main || !window.EventSource) return;
  var timer = null, busy = false, again = false;
  function typing() {
    var a = document.activeElement;
    return a && main.contains(a) && a.tagName === 'INPUT' && a.value !== '';
  }
  function refresh() {
    timer = null;
    if (busy) { again = true; return; }
    if (typing()) { timer = setTimeout(refresh, 1000); return; }
    busy = true;
    fetch(location.href, {credentials: 'same-origin', cache: 'no-store'})
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (body) {
        if (body === null) return;
        var next = new DOMParser().parseFromString(body, 'text/html').getElementById('live');
        if (next) main.replaceChildren.apply(main, Array.from(next.childNodes));
        document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
      })
      .catch(function () {})
      .then(function () { busy = false; if (again) { again = false; schedule(); } });
  }
  function schedule() { if (timer === null) timer = setTimeout(refresh, 150); }
  var source = new EventSource(url);
  ['act.start', 'act.end', 'act.cancelled', 'message.add', 'tool.post', 'tool.error']
    .forEach(function (name) { source.addEventListener(name, schedule); });
  source.onopen = function () {
    // back after a drop (a restart, a full buffer): what was missed meanwhile
    if (document.body.dataset.live === 'closed') schedule();
    document.body.dataset.live = 'open'; state.className = 'on';
  };
  source.onerror = function () { document.body.dataset.live = 'closed'; state.className = ''; };
})();
"""

#: The console's style sheet.
STYLE: Final = b"""
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #1d2330; background: #f6f7f9; }
header { display: flex; gap: 1.5em; align-items: center; padding: .6em 1.2em;
  background: #1d2330; color: #fff; }
header nav a { color: #cfd6e4; margin-right: 1em; text-decoration: none; }
header nav a[aria-current] { color: #fff; border-bottom: 2px solid #7fb3ff; }
header .logout { margin-left: auto; }
#live-state { color: #777; } #live-state.on { color: #5fd38d; }
main { padding: 1em 1.2em; max-width: 1100px; }
h1 { font-size: 1.3em; margin: .2em 0 .8em; } h2 { font-size: 1.1em; }
table { border-collapse: collapse; width: 100%; background: #fff; }
th, td { text-align: left; padding: .35em .6em; border-bottom: 1px solid #e3e6ec;
  vertical-align: top; }
pre { margin: 0; padding: .4em .6em; background: #f0f2f5; white-space: pre-wrap;
  word-break: break-all; max-height: 18em; overflow: auto; font-size: 12.5px; }
.card { background: #fff; border: 1px solid #dde1e8; border-radius: 6px; padding: .8em 1em;
  margin-bottom: 1em; }
.card dl { display: grid; grid-template-columns: 9em 1fr; gap: .25em .8em; margin: .5em 0; }
.card dt { color: #5b6475; } .card dd { margin: 0; }
.actions { display: flex; gap: .8em; align-items: center; flex-wrap: wrap; margin-top: .6em; }
.actions form { display: flex; gap: .4em; align-items: center; }
button { font: inherit; padding: .3em .9em; border-radius: 4px; border: 1px solid #98a2b3;
  background: #fff; cursor: pointer; }
button.approve { background: #1f7a46; color: #fff; border-color: #1f7a46; }
button.reject { background: #a3262a; color: #fff; border-color: #a3262a; }
input[type=text], input[type=password] { font: inherit; padding: .3em .5em; min-width: 16em; }
.badge { display: inline-block; padding: 0 .5em; border-radius: 3px; background: #e3e6ec; }
.b-completed, .b-used, .b-approved { background: #d3f2de; }
.b-awaiting_approval, .b-pending { background: #fff0c2; }
.b-denied, .b-rejected, .b-failed, .b-error, .b-invalid, .b-expired, .b-cancelled,
.b-interrupted, .b-timed_out { background: #f8d7d8; }
.notice { background: #e7f0ff; border: 1px solid #b9d0ff; padding: .5em .8em;
  border-radius: 4px; margin-bottom: 1em; }
.error { background: #fdecec; border-color: #f2b8ba; }
.empty { color: #5b6475; }
.muted { color: #5b6475; font-size: .92em; }
"""
