"""A self-contained HTML page of the analyze document: the text report and its charts."""

import html
import json

from .charts import charts
from .text import render

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>traceparse: {title}</title>
<script src="https://cdn.jsdelivr.net/npm/vega@5"></script>
<script src="https://cdn.jsdelivr.net/npm/vega-lite@5"></script>
<script src="https://cdn.jsdelivr.net/npm/vega-embed@6"></script>
<style>body{{font-family:sans-serif;margin:2em}} pre{{font-size:12px}} .chart{{margin:1em 0}}</style>
</head><body>
<h1>traceparse: {title}</h1>
{divs}
<pre>{text}</pre>
<script>
const specs = {specs};
specs.forEach((s, i) => vegaEmbed('#chart' + i, s));
</script>
</body></html>
"""


def render_html(doc: dict) -> str:
    specs = [c.to_dict() for c in charts(doc)]
    title = f"{len(doc['run']['files'])} rank file(s)"
    divs = "\n".join(f'<div class="chart" id="chart{i}"></div>' for i in range(len(specs)))
    return PAGE.format(title=html.escape(title), divs=divs, text=html.escape(render(doc)), specs=json.dumps(specs))
