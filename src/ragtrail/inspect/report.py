"""One self-contained HTML file per trace: funnel chart, query-hop chain, tables, fidelity panel.

Nothing is fetched when the file is opened (no scripts, fonts or images from anywhere): the chart
is inline SVG computed here, the styles are inline, and the manifest itself is embedded as JSON so
the file is also a machine-readable record. Safe to attach to a ticket or archive with a build.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2

from .manifest_model import Manifest, Survival

_BAR_WIDTH = 520
_ROW_HEIGHT = 34
#: captured text shown per row in the page (the embedded manifest keeps the whole preview)
_PREVIEW_CHARS = 280


def funnel(survival: Sequence[Survival]) -> dict[str, Any]:
    """Geometry of the evidence-survival funnel: one row per stage, kept and excluded bars."""
    peak = max([1, *(max(r.n_in, r.n_out) for r in survival)])
    rows = []
    for i, r in enumerate(survival):
        kept = round(_BAR_WIDTH * r.n_out / peak, 1)
        dropped = round(_BAR_WIDTH * r.excluded / peak, 1)
        rows.append({**r.as_dict(), "y": 8 + i * _ROW_HEIGHT, "kept_w": kept, "dropped_w": dropped, "dropped_x": kept})
    return {"rows": rows, "width": _BAR_WIDTH + 470, "height": 16 + len(rows) * _ROW_HEIGHT, "bar_x": 270}


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("ragtrail.inspect", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["score"] = lambda v: "" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))
    # the embedded manifest holds whatever the trace held (bytes values too): never a reason to fail
    env.policies["json.dumps_kwargs"] = {"sort_keys": True, "default": str}
    return env


def render(manifest: Manifest, limit: int = 200) -> str:
    """The report as one HTML string (the template reads the manifest's JSON, which it also embeds)."""
    template = _environment().get_template("report.html.j2")
    return template.render(
        m=manifest.as_dict(),
        funnel=funnel(manifest.survival),
        limit=limit,
        cited=set(manifest.cited),
        damaged=manifest.fidelity.damaged_rows(),
        preview_chars=_PREVIEW_CHARS,
    )


def write(manifest: Manifest, path: str | Path, limit: int = 200) -> Path:
    """Write the report; returns the absolute path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(manifest, limit), encoding="utf-8")
    return out.resolve()
