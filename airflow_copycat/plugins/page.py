"""The offsets page as server-rendered HTML: one section per connector, a table of its partitions
and committed offsets (with the run that last moved each), small reset/delete forms, and a
sink's consumer lag. Jinja2 with autoescaping: partitions and offsets are shown as compact JSON
text, never as markup. No JavaScript, no build step.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from jinja2 import Environment

from ..runtime.offset_admin import compact_json

_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Copycat offsets</title>
<style>
 body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #1a202c; }
 table { border-collapse: collapse; margin: .5rem 0 1rem; }
 th, td { border: 1px solid #cbd5e0; padding: .3rem .5rem; text-align: left; vertical-align: top; }
 th { background: #edf2f7; } code { font-size: .9em; }
 .banner { padding: .6rem .8rem; margin-bottom: 1rem; border-radius: 4px; white-space: pre-wrap; }
 .ok { background: #e6ffed; border: 1px solid #38a169; } .refused { background: #fff5f5; border: 1px solid #e53e3e; }
 .muted { color: #718096; } form.inline { display: inline; } textarea { width: 18rem; height: 2.2rem; }
 section { margin-bottom: 2rem; }
</style></head>
<body>
<h1>Copycat offsets</h1>
<p class="muted">Offset store: <code>{{ data.store }}</code>. Offsets change only while no run of the
connector is queued or running (Kafka Connect's rule); every change is read back from the store.
<a href="offsets.json">JSON</a></p>
{% if result %}<div class="banner {{ 'ok' if result.ok else 'refused' }}" role="status" id="result">{{ result.message }}</div>{% endif %}
{% if not data.connectors %}<p>No connector to show: no deployed DAG you may read runs one, and the offset store holds none you may see.</p>{% endif %}
{% for c in data.connectors %}
<section id="connector-{{ c.name }}" data-connector="{{ c.name }}">
<h2>{{ c.name }} <span class="muted">({{ c.kind or 'kind unknown' }})</span></h2>
<p>DAGs: {% for d in c.dags %}<a href="{{ ui }}/dags/{{ d | urlpart }}" target="_top">{{ d }}</a>{{ ", " if not loop.last }}{% else %}<span class="muted">none known</span>{% endfor %}
{% if c.runs_in_progress %}<br><strong>Runs in progress:</strong> {{ c.runs_in_progress | busy }}{% endif %}</p>
{% if c.kind != 'sink' %}
{% if c.offsets %}
<table><thead><tr><th>Partition</th><th>Committed offset</th><th>Last moved by</th>{% if c.changeable %}<th>Change</th>{% endif %}</tr></thead><tbody>
{% for o in c.offsets %}<tr data-partition="{{ o.partition | json }}">
<td><code>{{ o.partition | json }}</code></td><td><code class="offset">{{ o.offset | json }}</code></td>
<td>{% if o.last_move %}{% set m = o.last_move %}<a href="{{ ui }}/dags/{{ m.dag_id | urlpart }}/runs/{{ m.run_id | urlpart }}" target="_top">{{ m.dag_id }} / {{ m.run_id }}</a>
 <span class="muted">{{ m.when }}: <code>{{ m.before | json }}</code> &rarr; <code>{{ m.after | json }}</code>, {{ m.records }} record(s){% if not m.current %}; the offset was changed since{% endif %}</span>
{% else %}<span class="muted">no finish result of a live run (of a DAG whose runs you may read) in the metadata database</span>{% endif %}</td>
{% if c.changeable %}<td>
<form class="inline" method="post" action="offsets"><input type="hidden" name="connector" value="{{ c.name }}">
<input type="hidden" name="action" value="reset"><input type="hidden" name="partition" value="{{ o.partition | json }}">
<textarea name="offset" aria-label="new offset">{{ o.offset | json }}</textarea> <button type="submit">Reset</button></form>
<form class="inline" method="post" action="offsets"><input type="hidden" name="connector" value="{{ c.name }}">
<input type="hidden" name="action" value="delete"><input type="hidden" name="partition" value="{{ o.partition | json }}">
<button type="submit">Delete</button></form></td>{% endif %}
</tr>{% endfor %}</tbody></table>
{% else %}<p class="muted">No committed offsets: the next run starts every partition from scratch.</p>{% endif %}
{% if c.changeable %}
<details><summary>Reset or delete another partition</summary>
<form method="post" action="offsets"><input type="hidden" name="connector" value="{{ c.name }}">
<label>Action <select name="action"><option>reset</option><option>delete</option></select></label>
<label>Partition (JSON) <textarea name="partition"></textarea></label>
<label>New offset (JSON object) <textarea name="offset"></textarea></label>
<label><input type="checkbox" name="force" value="true"> Force (the partition has no offset yet)</label>
<button type="submit">Apply</button></form></details>
{% else %}<p class="muted">Changes are not offered: {{ c.why_not }}.</p>{% endif %}
{% else %}
<h3>Consumer group <code>connect-{{ c.name }}</code></h3>
{% if c.lag_error %}<p class="refused">Lag unknown: {{ c.lag_error }}</p>
{% elif c.lag %}<table><thead><tr><th>Topic</th><th>Partition</th><th>Committed</th><th>End</th><th>Lag</th></tr></thead><tbody>
{% for r in c.lag %}<tr><td>{{ r.topic }}</td><td>{{ r.partition }}</td><td>{{ 'none' if r.committed is none else r.committed }}</td>
<td>{{ 'unknown' if r.end is none else r.end }}</td><td class="lag">{{ 'not started' if r.committed is none else ('unknown' if r.lag is none else r.lag) }}</td></tr>{% endfor %}
</tbody></table>
{% else %}<p class="muted">The group has committed nothing yet.</p>{% endif %}
{% endif %}
</section>
{% endfor %}
</body></html>
"""

_ENV = Environment(autoescape=True)
_ENV.filters["json"] = compact_json
_ENV.filters["urlpart"] = lambda s: quote(str(s), safe="")
_ENV.filters["busy"] = lambda busy: "; ".join(
    f"DAG {d}: " + ", ".join(f"{n} {s}" for s, n in counts.items()) for d, counts in busy.items())
_PAGE = _ENV.from_string(_TEMPLATE)


def render(data: dict[str, Any], *, ui: str = "", result: dict[str, Any] | None = None) -> str:
    """The page for :func:`.overview.overview`'s ``data``. ``ui`` is the Airflow UI's base path (for
    links to DAGs and runs); ``result`` ``{"ok": bool, "message": str}`` is shown above the
    connectors after a change was asked for."""
    return _PAGE.render(data=data, ui=ui.rstrip("/"), result=result)
