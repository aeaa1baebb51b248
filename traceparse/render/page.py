"""The shell of traceparse's offline pages (report, dashboard): Vega, Vega-Lite and vega-embed are
inlined from vl-convert's bundle, a Content-Security-Policy forbids every request, and everything
taken from a trace reaches the page escaped (``text``) or as JSON that cannot close its script tag
(``script_json``)."""

import html
import json
import os
from functools import cache

# no request of any kind: scripts and styles inline only, images as data: URLs (Vega's own exports)
CSP = ("default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; "
       "img-src data: blob:; connect-src 'none'; form-action 'none'; base-uri 'none'")

STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1200px;padding:0 1em;color:#222}
h1{font-size:1.5em} h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
.findings li{margin:.3em 0} .status{font-weight:600;padding:0 .4em;border-radius:3px}
.ok{background:#d8f0d8} .warn{background:#fbeec0} .fail{background:#f6c9c9} .not_applicable,.unknown{background:#eee}
.chart{margin:1em 0} pre{font-size:12px;overflow-x:auto;background:#fafafa;padding:1em}
table{border-collapse:collapse;font-size:13px} td,th{border:1px solid #ddd;padding:2px 6px;text-align:right}
td:first-child,th:first-child{text-align:left} tr.regressed td{background:#f6c9c9}
"""

TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<title>{title}</title>
<style>{style}</style>
<script>{bundle}</script>
</head><body>
{body}
<script>
const specs = {specs};
window.chartViews = {{}};  // id -> Vega view, for the page's own controls (view.signal(...))
for (const [id, spec] of Object.entries(specs)) {{
  vegaEmbed('#' + id, spec, {{actions: false, renderer: 'svg'}}).then(r => {{ chartViews[id] = r.view; }}).catch(e => {{
    const el = document.getElementById(id); el.textContent = 'chart failed: ' + e; el.className = 'chart-error';
    console.error(e);
  }});
}}
</script>
</body></html>
"""


def text(value) -> str:
    """Any value from a trace or a document, as HTML text."""
    return html.escape(str(value), quote=True)


def script_json(value) -> str:
    """JSON to place inside <script>: '<', '>', '&' and the JavaScript line separators escaped, so a
    string such as '</script><script>...' stays a string."""
    s = json.dumps(value, default=str, allow_nan=False)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        s = s.replace(ch, esc)
    return s


@cache
def vega_bundle() -> str:
    """Vega, Vega-Lite (the version Altair writes) and vega-embed as one script, from vl-convert; kept in
    the cache folder once built (building it takes seconds)."""
    from importlib.metadata import version as installed

    import altair as alt

    from traceparse.cache_dir import cache_dir, temp_beside

    version = "v" + ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    saved = cache_dir() / f"vega-bundle-{installed('vl-convert-python')}-{version}.js"
    try:
        return saved.read_text(encoding="utf-8")
    except OSError:
        pass
    import vl_convert as vlc

    js = vlc.javascript_bundle(vl_version=version).replace("</script", "<\\/script")
    try:
        saved.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_beside(saved)
        tmp.write_text(js, encoding="utf-8")
        os.replace(tmp, saved)
    except OSError:
        pass  # a read-only cache: build it again next time
    return js


def render_page(title: str, body: str, specs: dict[str, dict]) -> str:
    """A whole page: ``body`` (HTML, already escaped by its maker) with a ``<div id=ID>`` for each
    chart in ``specs`` (id -> Vega-Lite spec)."""
    return TEMPLATE.format(csp=CSP, title=text(title), style=STYLE, bundle=vega_bundle(), body=body,
                           specs=script_json(specs))
