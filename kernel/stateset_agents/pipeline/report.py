"""`report RUN`: one self-contained HTML page (RUN/report.html) a person can open anywhere, offline.

Plots are inline SVG drawn here (no JavaScript, no external assets, no plotting library needed in the light
install): reward and KL per committed update (metrics.jsonl), before/after score distributions on the held-out cases
(eval_results.json), then the per-case table sorted by change and the lineage summary.
"""
from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import orjson

from ..core.errors import InputError
from ..core.jsonio import load_json, write_text
from ..plugin_api.checkpoints import quarantine, run_state
from ..plugin_api.evidence import add_statistics
from .lineage import MANIFEST, trace
from ..formatting import fmt as _fmt

REPORT = "report.html"
WIDTH, HEIGHT, PAD = 560, 240, 56
BASE_COLOUR, CANDIDATE_COLOUR, LINE_COLOUR = "#8c8c8c", "#1f77b4", "#d62728"
HISTOGRAM_BINS = 10

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem;color:#222;max-width:1200px}
h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:2rem}
table{border-collapse:collapse;font-size:.85rem}td,th{border:1px solid #ccc;padding:.25rem .5rem;vertical-align:top}
th{background:#f3f3f3}.worse{background:#fde8e8}.better{background:#e8f6e8}.plots{display:flex;flex-wrap:wrap;gap:1rem}
.bad{color:#b00020;font-weight:bold}.ok{color:#1b7f1b;font-weight:bold}code{font-size:.8rem}
"""


def _esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _axis_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    if hi == lo:
        return [lo]
    return [lo + (hi - lo) * i / (count - 1) for i in range(count)]


def _step_ticks(lo: float, hi: float, count: int = 6) -> list[int]:
    """Whole update numbers: a step axis labelled 2.75 would name an update that never happened."""
    return sorted({round(t) for t in _axis_ticks(lo, hi, min(count, int(hi - lo) + 1))})


def _frame(title: str, plot_id: str, body: str, x_label: str, y_label: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" id="{plot_id}" data-plot="{plot_id}" '
            f'width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{_esc(title)}">'
            f'<title>{_esc(title)}</title><rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>'
            f'<text x="{WIDTH / 2}" y="16" text-anchor="middle" font-size="13">{_esc(title)}</text>'
            f'<text x="{WIDTH / 2}" y="{HEIGHT - 4}" text-anchor="middle" font-size="11">{_esc(x_label)}</text>'
            f'<text x="10" y="{HEIGHT / 2}" font-size="11" transform="rotate(-90 10 {HEIGHT / 2})" '
            f'text-anchor="middle">{_esc(y_label)}</text>{body}</svg>')


def line_chart(title: str, plot_id: str, xs: Sequence[float], ys: Sequence[float], y_label: str) -> str:
    points = [(x, y) for x, y in zip(xs, ys) if y is not None and math.isfinite(y)]
    if not points:
        return f'<p id="{plot_id}">{_esc(title)}: no data.</p>'
    x_lo, x_hi = min(p[0] for p in points), max(p[0] for p in points)
    y_lo, y_hi = min(p[1] for p in points), max(p[1] for p in points)
    if y_hi == y_lo:
        y_lo, y_hi = y_lo - 0.5, y_hi + 0.5
    x_span = (x_hi - x_lo) or 1.0

    def sx(x: float) -> float:
        return PAD + (x - x_lo) / x_span * (WIDTH - 2 * PAD)

    def sy(y: float) -> float:
        return HEIGHT - PAD - (y - y_lo) / (y_hi - y_lo) * (HEIGHT - 2 * PAD)

    parts = [f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" stroke="#444"/>',
             f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{HEIGHT - PAD}" stroke="#444"/>']
    for t in _axis_ticks(y_lo, y_hi):
        parts.append(f'<text x="{PAD - 4}" y="{sy(t) + 4:.1f}" font-size="10" text-anchor="end">{t:.3g}</text>')
    for t in _step_ticks(x_lo, x_hi):
        parts.append(f'<text x="{sx(t):.1f}" y="{HEIGHT - PAD + 14}" font-size="10" text-anchor="middle">'
                     f'{t}</text>')
    path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in points)
    parts.append(f'<polyline class="series" fill="none" stroke="{LINE_COLOUR}" stroke-width="2" points="{path}"/>')
    parts.extend(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{LINE_COLOUR}"/>' for x, y in points)
    return _frame(title, plot_id, "".join(parts), "committed update", y_label)


def histogram(title: str, plot_id: str, base: Sequence[float], candidate: Sequence[float]) -> str:
    """Scores lie in [0, 1]: side-by-side bars per tenth, base grey, candidate blue."""
    if not base:
        return f'<p id="{plot_id}">{_esc(title)}: no held-out evaluation.</p>'

    def counts(values: Sequence[float]) -> list[int]:
        out = [0] * HISTOGRAM_BINS
        for v in values:
            out[min(HISTOGRAM_BINS - 1, max(0, int(v * HISTOGRAM_BINS)))] += 1
        return out

    cb, cc = counts(base), counts(candidate)
    top = max(cb + cc) or 1
    slot = (WIDTH - 2 * PAD) / HISTOGRAM_BINS
    parts = [f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" stroke="#444"/>']
    for i, (b, c) in enumerate(zip(cb, cc)):
        for k, (n, colour, side) in enumerate(((b, BASE_COLOUR, "base"), (c, CANDIDATE_COLOUR, "candidate"))):
            h = n / top * (HEIGHT - 2 * PAD)
            x = PAD + i * slot + 2 + k * (slot - 4) / 2
            parts.append(f'<rect class="bar {side}" x="{x:.1f}" y="{HEIGHT - PAD - h:.1f}" '
                         f'width="{(slot - 4) / 2:.1f}" height="{h:.1f}" fill="{colour}"><title>{side} '
                         f'{i / HISTOGRAM_BINS:.1f}-{(i + 1) / HISTOGRAM_BINS:.1f}: {n}</title></rect>')
        parts.append(f'<text x="{PAD + i * slot + slot / 2:.1f}" y="{HEIGHT - PAD + 14}" font-size="10" '
                     f'text-anchor="middle">{i / HISTOGRAM_BINS:.1f}</text>')
    parts.append(f'<rect x="{WIDTH - 150}" y="26" width="10" height="10" fill="{BASE_COLOUR}"/>'
                 f'<text x="{WIDTH - 136}" y="35" font-size="11">base</text>'
                 f'<rect x="{WIDTH - 90}" y="26" width="10" height="10" fill="{CANDIDATE_COLOUR}"/>'
                 f'<text x="{WIDTH - 76}" y="35" font-size="11">adapter</text>')
    return _frame(title, plot_id, "".join(parts), "score", "cases")


def _read_metrics(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for raw in path.read_bytes().splitlines():
        try:
            out.append(orjson.loads(raw))
        except orjson.JSONDecodeError:
            continue  # a killed run may leave one partial last line
    return out


def _case_rows(cases: Sequence[Mapping[str, Any]]) -> str:
    ordered = sorted(cases, key=lambda c: (c["candidate"]["score"] - c["base"]["score"], str(c.get("id"))))
    rows = []
    for c in ordered:
        diff = c["candidate"]["score"] - c["base"]["score"]
        prompt = c.get("prompt") or []
        last_user = next((m.get("content") for m in reversed(prompt) if m.get("role") == "user"), "")
        rows.append(f'<tr class="{"worse" if diff < 0 else "better" if diff > 0 else ""}"><td>{_esc(c.get("id"))}'
                    f'</td><td>{_esc(last_user)}</td><td>{_fmt(c["base"]["score"])}</td>'
                    f'<td>{_fmt(c["candidate"]["score"])}</td><td>{diff:+.3f}</td>'
                    f'<td>{_esc(c["base"].get("text", ""))}</td><td>{_esc(c["candidate"].get("text", ""))}</td></tr>')
    return ('<table id="cases"><tr><th>case</th><th>prompt (last user turn)</th><th>base</th><th>adapter</th>'
            '<th>change</th><th>base output</th><th>adapter output</th></tr>' + "".join(rows) + "</table>")


def _statistics(evaluation: Mapping[str, Any]) -> str:
    s = evaluation.get("statistics") or {}
    totals = evaluation.get("totals") or {}
    if not s and not totals:
        return "<p>No held-out evaluation.</p>"
    interval = s.get("interval") or {}
    trunc = evaluation.get("truncation") or {}
    items = [("cases", totals.get("cases")), ("base mean", _fmt(totals.get("base_mean"))),
             ("adapter mean", _fmt(totals.get("candidate_mean"))),
             ("mean difference", _fmt(totals.get("mean_difference"))),
             ("95% interval", f"[{_fmt(interval.get('low'))}, {_fmt(interval.get('high'))}]" if interval else "n/a"),
             ("p-value", f"{_fmt(s.get('p_value'), 4)} ({_esc(s.get('p_value_method', 'not computed'))})"),
             ("improved / regressed / same",
              f"{totals.get('improved')} / {totals.get('regressed')} / {totals.get('unchanged')}"),
             ("truncated (base / adapter)", f"{_fmt(trunc.get('base'))} / {_fmt(trunc.get('candidate'))}")]
    return ('<table id="statistics">' + "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in items)
            + "</table><p>One run's gain is descriptive; promotion needs the multi-seed gate.</p>")


def _lineage(run: Path) -> str:
    lineage = trace(run)
    chain = lineage.as_dict()
    manifest = chain.get("manifest") or {}
    dataset = chain.get("dataset") or {}
    promotion = chain.get("promotion")
    verdict = ('<p class="ok">every recorded digest matches</p>' if lineage.ok else
               '<p class="bad">lineage broken:</p><ul>' + "".join(
                   f"<li><code>{_esc(p['path'])}</code>: {_esc(p['message'])}</li>" for p in lineage.problems)
               + "</ul>")
    items = [("adapter sha256", (chain.get("adapter") or {}).get("sha256")),
             ("run id", manifest.get("run_id")), ("algorithm", manifest.get("algorithm")),
             ("base model", manifest.get("base_model")), ("base model revision", manifest.get("base_model_revision")),
             ("seed", manifest.get("seed")), ("config digest", manifest.get("config_digest")),
             ("committed updates", manifest.get("committed_updates")),
             ("receipts", _receipts_line(chain.get("receipts"))),
             ("dataset", f"{dataset.get('path')} ({dataset.get('rows')} rows, sha256 {dataset.get('sha256')})"),
             ("source logs", ", ".join(f"{p} ({len(s.get('lines') or [])} lines)"
                                       for p, s in (chain.get("sources") or {}).items()) or "none recorded"),
             ("promotion", "none" if promotion is None else
              ("promoted" if promotion.get("promoted") else
               f"not promoted ({', '.join(promotion.get('failed_conditions') or [])})"))]
    warnings = "".join(f"<li><code>{_esc(w['path'])}</code>: {_esc(w['message'])}</li>" for w in lineage.warnings)
    return (verdict + '<table id="lineage">' + "".join(f"<tr><th>{_esc(k)}</th><td><code>{_esc(v)}</code></td></tr>"
                                                      for k, v in items) + "</table>" +
            (f"<p>Not verified here:</p><ul>{warnings}</ul>" if warnings else ""))


def _receipts_line(receipts: Mapping[str, Any] | None) -> str:
    if not receipts:
        return "none (a registry entry or a run from before receipts)"
    mark = {True: "verified", False: "BROKEN", None: "none written"}[receipts.get("verified")]
    return f"{receipts.get('committed')} committed of {receipts.get('attempted')} attempted updates ({mark})"


def _quarantine_banner(run: Path, manifest: Mapping[str, Any]) -> str:
    """A quarantined run says so before anything else: its numbers are not a finished run's."""
    record = quarantine(run)
    if record is None and manifest.get("status") != "quarantined":
        return ""
    record = record or manifest.get("quarantine") or manifest.get("failure") or {}
    return (f'<p class="bad" id="quarantine">QUARANTINED: {_esc(record.get("reason") or record.get("cause"))} at '
            f'update {_esc(record.get("step"))}: {_esc(record.get("message"))}. Last good checkpoint: '
            f'{_esc(record.get("last_good_checkpoint", record.get("last_checkpoint_step")))}. A quarantined run is '
            "never deployed, nominated or gated; <code>train --reload</code> with the run's flags restores its "
            "latest complete checkpoint, verified, and finishes it.</p>")


def render_report(run: str | Path) -> str:
    run = Path(run)
    if not (run / MANIFEST).exists():
        raise InputError("not a run directory (no manifest.json)", path=str(run))
    manifest = load_json(run / MANIFEST)
    metrics = _read_metrics(run / "metrics.jsonl")
    evaluation = load_json(run / "eval_results.json") if (run / "eval_results.json").exists() else {}
    cases = evaluation.get("cases") or []
    if cases and "statistics" not in evaluation:  # written before train added them: compute, same module
        add_statistics(evaluation)
    steps = [m.get("step", i + 1) for i, m in enumerate(metrics)]
    plots = [line_chart("reward per update (mean over the group)", "reward-curve", steps,
                        [m.get("reward_mean") for m in metrics], "reward"),
             line_chart("KL to the reference per update", "kl-curve", steps, [m.get("kl") for m in metrics], "KL"),
             histogram("held-out scores: base vs adapter", "score-distribution",
                       [c["base"]["score"] for c in cases], [c["candidate"]["score"] for c in cases])]
    title = f"run {manifest.get('run_id', '')[:12]}: {manifest.get('algorithm')}"
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_esc(title)}</title><style>{_STYLE}</style></head><body>"
            f"<h1>{_esc(title)}</h1>{_quarantine_banner(run, manifest)}<p>status {_esc(run_state(run))}, "
            f"{_esc(manifest.get('committed_updates'))} committed updates, seed {_esc(manifest.get('seed'))}</p>"
            f"<h2>Training</h2><div class=\"plots\">{plots[0]}{plots[1]}</div>"
            f"<h2>Held-out evaluation</h2><div class=\"plots\">{plots[2]}</div>{_statistics(evaluation)}"
            f"<h2>Cases, worst change first</h2>{_case_rows(cases) if cases else '<p>No cases.</p>'}"
            f"<h2>Lineage</h2>{_lineage(run)}</body></html>")


def write_report(run: str | Path) -> Path:
    path = Path(run) / REPORT
    write_text(path, render_report(run))
    return path
