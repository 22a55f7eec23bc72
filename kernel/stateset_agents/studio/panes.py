"""The studio's four panes (Data, Configure, Review, Watch): widgets only; what they do is `actions` and `feed`."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, DataTable, Input, Label, OptionList, ProgressBar, RichLog, Select, Static

from . import actions
from .feed import CURVES, Snapshot, results_rows, results_summary

NONE = "(none)"


def _fmt(value: Any, digits: int = 4) -> str:
    if isinstance(value, bool) or value is None:
        return "-" if value is None else str(value)
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e-3 and value else f"{value:.{digits}f}".rstrip("0").rstrip(".")
    return str(value)


class DataPane(VerticalScroll):
    """Pick a folder `improve run` wrote (or type a path), see its summary and a few rows, pick the split files."""

    def __init__(self, workspace: Path, **kw):
        super().__init__(**kw)
        self.workspace = workspace

    def compose(self):
        found = actions.find_datasets(self.workspace)
        yield Label("Curated datasets in the workspace (folders `improve run` wrote):")
        yield OptionList(*[actions.rel(p, self.workspace) for p in found] or [], id="data-list")
        with Horizontal(classes="row"):
            yield Input(placeholder="or a folder / curated.jsonl path", id="data-path")
            yield Button("Use", id="data-use", variant="primary")
        yield Static("", id="data-error", classes="error")
        yield Static("", id="data-summary")
        with Horizontal(classes="row"):
            yield Label("validation:", classes="label")
            yield Select([], id="data-validation", allow_blank=True, prompt=NONE)
        yield Static("", id="data-test")

    def show(self, info: dict[str, Any]) -> None:
        ws = self.workspace
        summary = info.get("summary") or {}
        scores = summary.get("scores") or {}
        counts = summary.get("counts") or {}
        lines = [f"[b]{actions.rel(info['dataset'], ws)}[/]: {info['rows']} rows"
                 + (f", reward {info['reward']}" if info.get("reward") else "")]
        if scores:
            q = scores.get("quantiles") or {}
            lines.append(f"scores over {scores.get('n')} {scores.get('over')}: mean {_fmt(scores.get('mean'))}, "
                         f"p10 {_fmt(q.get('p10'))}, median {_fmt(q.get('p50'))}, p90 {_fmt(q.get('p90'))}")
            hist = (scores.get("histogram") or {}).get("counts") or []
            if hist:
                top = max(hist) or 1
                bars = "".join(" ▁▂▃▄▅▆▇█"[min(8, round(8 * c / top))] for c in hist)
                lines.append(f"distribution 0 [{bars}] 1")
            checks = scores.get("checks") or {}
            if checks:
                lines.append("per-check means: " + ", ".join(f"{k} {_fmt(v.get('mean'), 2)}"
                                                             for k, v in checks.items()))
        if counts:
            lines.append(f"curated {counts.get('curated')} of {counts.get('turns_graded')} graded turns; "
                         f"validation {counts.get('validation_prompts', 0)} prompts, test "
                         f"{counts.get('test_prompts', 0)} prompts")
        bad = [f"{name} {o.get('state')}" for name, o in (summary.get("outputs") or {}).items()
               if o.get("state") not in (None, "ok")]
        if bad:
            lines.append(f"[red]changed since improve run: {', '.join(bad)}[/]")
        for row in info.get("sample") or []:
            lines.append(f"  user: {row['prompt'][:70]!s}\n    -> {row['completion'][:66]!s} "
                         f"(score {_fmt(row['score'])})")
        self.query_one("#data-summary", Static).update("\n".join(lines))
        self.query_one("#data-error", Static).update("")
        select = self.query_one("#data-validation", Select)
        options = [(actions.rel(info["validation"], ws), str(info["validation"]))] if info.get("validation") else []
        select.set_options(options)
        if options:
            select.value = options[0][1]
        test = info.get("test")
        self.query_one("#data-test", Static).update(
            f"test: {actions.rel(test, ws)} (kept for one look at a nominated checkpoint: never trained or "
            "selected on)" if test else "test: none")


class ConfigurePane(VerticalScroll):
    """The form: provider, algorithm, reward, base model, objective fields, cap. Errors show under each field."""

    def compose(self):
        def field(key: str, label: str, widget):
            with Horizontal(classes="row", id=f"row-{key.replace('.', '-')}"):
                yield Label(f"{label}:", classes="label")
                yield widget
            yield Static("", id=f"err-{key.replace('.', '-')}", classes="error field-error")

        yield from field("dataset", "dataset", Static("-", id="cfg-dataset"))
        yield from field("provider", "provider", Select([(p, p) for p in actions.providers()], id="cfg-provider",
                                                        allow_blank=True, compact=True))
        yield from field("algorithm", "algorithm", Select([], id="cfg-algorithm", allow_blank=True,
                                                                   compact=True))
        yield from field("reward", "reward", Select([(r, r) for r in actions.rewards()], id="cfg-reward",
                                                                    compact=True))
        yield from field("base_model", "base model", Input(placeholder="offline default (SmolLM2-135M-Instruct); "
                                                                       "a path or hub id", id="cfg-base_model",
                                                                       compact=True))
        yield from field("base_model_revision", "revision", Input(placeholder="with a hub id: a branch, tag or "
                                                                              "commit sha", compact=True,
                                                                  id="cfg-base_model_revision"))
        for key, label in actions.FORM_FIELDS.items():
            yield from field(f"training.{key}", label, Input(id=f"cfg-training-{key}", compact=True))
        yield from field("max_cost_usd", "cap USD", Input(placeholder="required: the most the run may spend",
                                                                   id="cfg-max_cost_usd", compact=True))
        yield from field("max_hours", "max hours", Input(id="cfg-max_hours", compact=True))
        yield from field("gpu", "GPU (remote)", Input(placeholder="the provider's default", id="cfg-gpu",
                                                                  compact=True))
        yield Static("", id="cfg-errors", classes="error")
        with Horizontal(classes="row"):
            yield Button("Check", id="cfg-check")
            yield Button("Review (ctrl+r)", id="cfg-review", variant="primary")


class ReviewPane(VerticalScroll):
    """The plan as `finetune prepare` writes it, the quote against the cap; Launch only from here."""

    def compose(self):
        yield Static("Review a plan with ctrl+r (or Configure > Review).", id="review-body")
        yield Static("", id="review-error", classes="error")
        with Horizontal(classes="row"):
            yield Button("Launch (ctrl+l)", id="review-launch", variant="success", disabled=True)

    def show(self, quote: dict[str, Any] | None, plan: dict[str, Any] | None, workspace: Path) -> None:
        lines = []
        if quote:
            q = quote["quote"]
            lines.append(f"[b]quote[/] ({q.get('provider')}): GPU {q.get('gpu')}")
            if quote.get("describe"):
                lines.append(f"  {quote['describe']}")
            if quote.get("worst_case") is not None:
                above = quote["worst_case"] > quote["cap"]
                lines.append(f"  worst case / cap: ${quote['worst_case']:.2f} / ${quote['cap']:.2f} "
                             + ("[red](ABOVE the cap)[/]" if above else "(within the cap)"))
            if q.get("live") is False:
                lines.append(f"  [yellow]{q.get('live_needs') or 'not a live price'}[/]")
        if plan:
            config = plan["config"]
            training = config.get("training") or {}
            lines += [f"[b]plan {plan['run_id']}[/]", f"  checksum {plan['checksum']}",
                      f"  written to {actions.rel(plan.get('_workspace'), workspace)}/plan.json",
                      f"  provider {plan['provider']}, GPU {plan['gpu']['id']} x{plan['gpu']['count']}, max hours "
                      f"{plan['max_hours']}",
                      f"  {config.get('algorithm')} on {config.get('base_model') or 'the offline default model'}"
                      + (f" at revision {config['base_model_revision']}" if config.get("base_model_revision")
                         else "") + f", reward {config.get('reward')}",
                      f"  dataset sha256 {plan['inputs']['dataset']['sha256'][:16]}..., config sha256 "
                      f"{plan['config_sha256'][:16]}..."]
            shown = ", ".join(f"{label} {_fmt(training[k])}" for k, label in actions.FORM_FIELDS.items()
                              if k in training)
            if shown:
                lines.append(f"  {shown}")
            if plan.get("resume"):
                r = plan["resume"]
                lines.append(f"  continues {r.get('parent_run_id')} from checkpoint {r.get('checkpoint_step')} "
                             f"({r.get('mode')})")
            if plan.get("_notice"):
                lines.append(f"  [yellow]{plan['_notice']}[/]")
        self.query_one("#review-body", Static).update("\n".join(lines) or "-")


class WatchPane(VerticalScroll):
    """Curves, committed updates against the budget, checkpoints, the log tail, stop/resume, held-out results."""

    def compose(self):
        yield Static("No run yet: launch one from Review, or attach below.", id="watch-title")
        yield ProgressBar(total=1, show_eta=False, id="watch-progress")
        yield Static("", id="watch-curve-label")
        from textual_plotext import PlotextPlot

        yield PlotextPlot(id="watch-plot")
        with Horizontal(classes="row"):
            yield Button("Stop (ctrl+t)", id="watch-stop", variant="warning", disabled=True)
            yield Button("Resume (ctrl+g)", id="watch-resume", disabled=True)
            yield Button("Next curve (ctrl+n)", id="watch-curve")
        yield Label("checkpoints")
        yield DataTable(id="watch-checkpoints", show_cursor=False)
        yield Label("held-out results (worst regressions first)")
        yield Static("", id="watch-results-summary")
        yield DataTable(id="watch-results", show_cursor=False)
        yield Label("log")
        yield RichLog(id="watch-log", max_lines=400, wrap=True)
        with Horizontal(classes="row"):
            yield Input(placeholder="attach: a run directory or run id", id="watch-attach")
            yield Button("Attach (ctrl+o)", id="watch-attach-button")

    def on_mount(self) -> None:
        self.query_one("#watch-checkpoints", DataTable).add_columns("step", "updates", "whole", "validation",
                                                                    "sha256")
        self.query_one("#watch-results", DataTable).add_columns("case", "base", "adapter", "difference")
        self.curve = 0
        self.snapshot: Snapshot | None = None
        self._logged = 0
        self.query_one("#watch-progress", ProgressBar).display = False
        self._draw_plot()

    @property
    def curve_name(self) -> str:
        return CURVES[self.curve % len(CURVES)]

    def points(self, name: str | None = None) -> list[tuple[int, float]]:
        return list((self.snapshot.points if self.snapshot else {}).get(name or self.curve_name, []))

    def next_curve(self) -> None:
        self.curve = (self.curve + 1) % len(CURVES)
        self._draw_plot()

    def _draw_plot(self) -> None:
        plot = self.query_one("#watch-plot")
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        pts = self.points()
        if pts:
            plt.plot([p[0] for p in pts], [p[1] for p in pts], marker="braille")
        plt.xlabel("committed update")
        plt.title(self.curve_name)
        plot.refresh()
        self.query_one("#watch-curve-label", Static).update(
            f"curve {self.curve_name} ({len(pts)} points) · ctrl+n: " + ", ".join(CURVES))

    def show(self, title: str, snap: Snapshot, *, can_stop: bool, can_resume: bool) -> None:
        self.snapshot = snap
        budget = f" of {snap.budget}" if snap.budget else ""
        held = results_summary(snap.results) if snap.results else None  # in the title: seen at 80x24 too
        self.query_one("#watch-title", Static).update(
            f"[b]{title}[/]: {snap.phase} · {snap.committed}{budget} committed updates"
            + (f" · {held['split']}: improved {held['improved']}, regressed {held['regressed']}, p "
               f"{_fmt(held['p_value'])}" if held else "")
            + (f" · [red]{snap.error}[/]" if snap.error else ""))
        bar = self.query_one("#watch-progress", ProgressBar)
        bar.display = bool(snap.budget)  # no budget known (a run directory still being written): no bar
        if snap.budget:
            bar.update(total=snap.budget, progress=snap.committed)
        self._draw_plot()
        table = self.query_one("#watch-checkpoints", DataTable)
        table.clear()
        for row in snap.checkpoints:
            score = (row.get("validation") or {}).get("mean")
            table.add_row(str(row.get("step")), str(row.get("committed_updates")),
                          "yes" if row.get("complete") else "no", _fmt(score), str(row.get("sha256") or "")[:12])
        results = self.query_one("#watch-results", DataTable)
        results.clear()
        summary = self.query_one("#watch-results-summary", Static)
        if snap.results:
            s = results_summary(snap.results)
            summary.update(f"{s['split']}: {s['cases']} cases, improved {s['improved']}, regressed {s['regressed']}, "
                           f"same {s['unchanged']}; base {_fmt(s['base_mean'])} -> adapter "
                           f"{_fmt(s['candidate_mean'])}; p-value {_fmt(s['p_value'])}")
            for row in results_rows(snap.results):
                results.add_row(str(row["id"]), _fmt(row["base"]), _fmt(row["candidate"]), _fmt(row["difference"]))
        else:
            summary.update("none yet (written when the run completes)")
        log = self.query_one("#watch-log", RichLog)
        if len(snap.logs) < self._logged:
            log.clear()
            self._logged = 0
        for line in snap.logs[self._logged:]:
            log.write(line)
        self._logged = len(snap.logs)
        self.query_one("#watch-stop", Button).disabled = not can_stop
        self.query_one("#watch-resume", Button).disabled = not can_resume
