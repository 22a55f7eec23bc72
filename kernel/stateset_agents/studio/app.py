"""`stateset-agents studio [WORKSPACE]`: the Textual app. It parses the form, calls `actions`/`feed`, renders.

Slow calls (the objective's config class imports torch; prepare snapshots the dataset; a launch, a follow and a stop
wait on the provider) run in thread workers, so the screen never freezes; their results come back to the UI thread.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Header, Input, OptionList, Select, Static, TabbedContent, TabPane

from . import actions
from .feed import RunFeed
from .panes import ConfigurePane, DataPane, ReviewPane, WatchPane

#: (keys, what they do): the help screen and docs/studio.md list these.
KEYS = (
    ("F1 / ?", "this help (Escape closes it)"),
    ("F2 F3 F4 F5", "the Data, Configure, Review and Watch panes"),
    ("Tab / Shift+Tab", "move between fields and buttons; Enter presses a button or picks a list item"),
    ("ctrl+r", "review: check the form, quote it against the cap and write the plan (as `finetune prepare`)"),
    ("ctrl+l", "launch the reviewed plan (the same plan attaches to its run, never a second job)"),
    ("ctrl+t", "stop the run cooperatively (it saves a checkpoint at the next safe boundary)"),
    ("ctrl+g", "resume a stopped run exactly from its last complete checkpoint (a plan to review and launch)"),
    ("ctrl+n", "next curve: reward mean, reward std, loss, KL, clip fraction, tokens/s"),
    ("ctrl+o", "attach to the run directory or run id typed in Watch"),
    ("PgUp / PgDn", "scroll the pane"),
    ("ctrl+q", "quit (a launched run keeps running; attach to it again later)"),
)

CSS = """
.row { height: auto; }
.label { width: 16; padding: 1 1 0 0; }
.error { color: $error; }
.field-error { padding-left: 16; height: auto; display: none; }
.field-error.shown { display: block; }
ConfigurePane .label { padding: 0 1 0 0; }
ConfigurePane .row { margin-bottom: 1; }
Select { width: 1fr; }
#data-list { height: auto; max-height: 6; }
#data-path, #watch-attach { width: 1fr; }
#watch-plot { height: 12; min-height: 8; }
#watch-checkpoints { height: auto; max-height: 8; }
#watch-results { height: auto; max-height: 12; }
#watch-log { height: 8; }
HelpScreen { align: center middle; }
#help { width: 76; height: auto; max-height: 22; border: round $accent; padding: 0 1; background: $panel; }
"""


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,f1,question_mark", "app.pop_screen", "close")]

    def compose(self) -> ComposeResult:
        text = "\n".join(f"[b]{keys:<16}[/] {what}" for keys, what in KEYS)
        with VerticalScroll(id="help"):
            yield Static("[b]StateSet Agents studio: keys[/]\n\n" + text + "\n\nEvery action is also a button "
                         "(mouse or Tab + Enter). docs/studio.md has the screens.")


class StudioApp(App):
    TITLE = "stateset-agents studio"
    CSS = CSS
    BINDINGS = [
        Binding("f1", "help", "help"), Binding("question_mark", "help", "help", show=False),
        Binding("f2", "pane('data')", "data"), Binding("f3", "pane('configure')", "configure"),
        Binding("f4", "pane('review')", "review"), Binding("f5", "pane('watch')", "watch"),
        Binding("ctrl+r", "review", "review plan"), Binding("ctrl+l", "launch", "launch"),
        Binding("ctrl+t", "stop", "stop"), Binding("ctrl+g", "resume", "resume", show=False),
        Binding("ctrl+n", "next_curve", "curve", show=False), Binding("ctrl+o", "attach", "attach", show=False),
    ]

    def __init__(self, workspace: Path, *, attach: str | None = None, poll_s: float = 1.0):
        super().__init__()
        self.workspace = Path(workspace)
        self.config: dict[str, Any] = actions.load_config(self.workspace)
        self.plan: dict[str, Any] | None = None
        self.feed: RunFeed | None = None
        self.poll_s = poll_s
        self._attach_first = attach
        self.followed: set[str] = set()
        self.stopping = False
        self._polling = threading.Lock()  # held while a poll runs (`_tick`)
        self.last_errors: list[tuple[str, str]] = []

    def compose(self) -> ComposeResult:
        yield Header()
        with TabbedContent(initial="data", id="tabs"):
            with TabPane("Data", id="data"):
                yield DataPane(self.workspace)
            with TabPane("Configure", id="configure"):
                yield ConfigurePane()
            with TabPane("Review", id="review"):
                yield ReviewPane()
            with TabPane("Watch", id="watch"):
                yield WatchPane()
        yield Footer()

    def on_mount(self) -> None:
        for field in self.query(Input):
            field.cursor_blink = False  # a steady cursor: screenshots and snapshots are the same every time
        self.sub_title = self.workspace.name  # the full path is in every pane that needs it
        self._fill_form()
        if self.config.get("dataset"):
            self.use_dataset(self.config["dataset"], switch=False)
        found = self.query_one("#data-list", OptionList)
        if found.option_count:
            found.focus()  # keyboard-first: Enter picks the highlighted dataset
            found.highlighted = 0
        self.set_interval(self.poll_s, self._tick)
        if self._attach_first:  # once the tabs are up (their initial pane would win otherwise)
            self.call_after_refresh(self.attach, self._attach_first)

    # ------------------------------------------------------------------------------------------------ navigation

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_pane(self, name: str) -> None:
        self.query_one("#tabs", TabbedContent).active = name
        self.call_after_refresh(self._focus_in, name)

    def _focus_in(self, name: str) -> None:
        """Keyboard-first: a pane opens with its first field (or button) focused."""
        pane = self.query_one(f"#{name}", TabPane)
        if self.focused is not None and pane in self.focused.ancestors:
            return
        for widget in pane.query("OptionList, Select, Input, Button"):
            if widget.focusable and widget.display and not widget.disabled:
                widget.focus()
                return

    # ------------------------------------------------------------------------------------------------------ data

    @on(OptionList.OptionSelected, "#data-list")
    def _picked(self, event: OptionList.OptionSelected) -> None:
        self.use_dataset(str(event.option.prompt))

    @on(Button.Pressed, "#data-use")
    @on(Input.Submitted, "#data-path")
    def _typed(self) -> None:
        self.use_dataset(self.query_one("#data-path", Input).value.strip())

    def use_dataset(self, choice: str, *, switch: bool = True) -> bool:
        pane = self.query_one(DataPane)
        try:
            info = actions.data_summary(choice, self.workspace)
        except Exception as exc:  # noqa: BLE001 - shown in the pane; nothing is chosen
            pane.query_one("#data-error").update(f"{choice}: {actions.message(exc)}")
            return False
        pane.show(info)
        self.config["dataset"] = str(info["dataset"])
        self.config["eval_prompts"] = str(info["validation"]) if info.get("validation") else None
        if info.get("reward") and not self.config.get("reward"):
            self.config["reward"] = info["reward"]
        self._fill_form()
        if switch:
            self.action_pane("configure")
        return True

    @on(Select.Changed, "#data-validation")
    def _validation(self, event: Select.Changed) -> None:
        self.config["eval_prompts"] = None if event.value is Select.NULL else str(event.value)

    # ------------------------------------------------------------------------------------------------- configure

    def _fill_form(self) -> None:
        c = self.config
        form = self.query_one(ConfigurePane)
        form.query_one("#cfg-dataset").update(actions.rel(c.get("dataset"), self.workspace)
                                              + (f" (validation {actions.rel(c['eval_prompts'], self.workspace)})"
                                                 if c.get("eval_prompts") else ""))
        provider = c.get("provider") or actions.default_provider()
        if provider in actions.providers():
            form.query_one("#cfg-provider", Select).value = provider
        self._algorithms()
        if c.get("reward") in actions.rewards():
            form.query_one("#cfg-reward", Select).value = c["reward"]
        for key in ("base_model", "base_model_revision", "max_cost_usd", "max_hours", "gpu"):
            value = c.get(key)
            form.query_one(f"#cfg-{key}", Input).value = "" if value is None else str(value)
        training = c.get("training") or {}
        for key in actions.FORM_FIELDS:
            if key in training:
                form.query_one(f"#cfg-training-{key}", Input).value = str(training[key])

    def _algorithms(self) -> None:
        select = self.query_one("#cfg-algorithm", Select)
        names = actions.algorithms()
        select.set_options([(n, n) for n in names])
        chosen = self.config.get("algorithm")
        if chosen in names:
            select.value = chosen
        elif names:
            select.value = names[0]

    @on(Select.Changed, "#cfg-algorithm")
    def _algorithm(self, event: Select.Changed) -> None:
        if event.value is not Select.NULL:
            self._load_defaults(str(event.value))

    @work(thread=True, exclusive=True, group="defaults")
    def _load_defaults(self, algorithm: str) -> None:
        try:
            defaults = actions.objective_defaults(algorithm)
        except Exception as exc:  # noqa: BLE001 - an objective that fails to import says so in the form
            self.call_from_thread(self._error_box, [("algorithm", actions.message(exc))])
            return
        self.call_from_thread(self._show_defaults, algorithm, defaults)

    def _show_defaults(self, algorithm: str, defaults: dict[str, Any]) -> None:
        form = self.query_one(ConfigurePane)
        for key in actions.FORM_FIELDS:
            form.query_one(f"#row-training-{key}").display = key in defaults
            field = form.query_one(f"#cfg-training-{key}", Input)
            field.placeholder = f"default {defaults[key]}" if key in defaults else ""
        self.defaults_for = algorithm

    def read_form(self) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        """The config the form says (the stored config's other keys kept) and the values that are not numbers."""
        form = self.query_one(ConfigurePane)
        config = {k: v for k, v in self.config.items()}
        problems: list[tuple[str, str]] = []
        for key in ("provider", "algorithm", "reward"):
            value = form.query_one(f"#cfg-{key}", Select).value
            config[key] = None if value is Select.NULL else value
        for key in ("base_model", "base_model_revision"):
            config[key] = form.query_one(f"#cfg-{key}", Input).value.strip() or None
        config["gpu"] = form.query_one("#cfg-gpu", Input).value.strip() or None
        for key in ("max_cost_usd", "max_hours"):
            config[key] = _number(form.query_one(f"#cfg-{key}", Input).value, key, problems)
        training = dict(config.get("training") or {})
        for key in actions.FORM_FIELDS:
            row = form.query_one(f"#row-training-{key}")
            raw = form.query_one(f"#cfg-training-{key}", Input).value
            training.pop(key, None)
            if row.display and raw.strip():
                training[key] = _number(raw, f"training.{key}", problems)
        config["training"] = training
        return {k: v for k, v in config.items() if v is not None}, problems

    def check(self) -> dict[str, Any] | None:
        """Validate the form; show every problem under its field. The config when valid (and saved)."""
        config, problems = self.read_form()
        errors = problems or actions.validate(config)
        self.last_errors = errors
        self._error_box(errors)
        self.config = config
        actions.save_config(self.workspace, config)
        return None if errors else config

    def _error_box(self, errors: list[tuple[str, str]]) -> None:
        form = self.query_one(ConfigurePane)
        for box in form.query(".field-error"):
            box.update("")
            box.remove_class("shown")
        for where, text in errors:
            key = where.split(".")[0] if not where.startswith("training.") else ".".join(where.split(".")[:2])
            ident = key.replace(".", "-")
            found = form.query(f"#err-{ident}") if ident.replace("-", "_").isidentifier() else None
            if found:
                found.first().update(text)
                found.first().add_class("shown")
        form.query_one("#cfg-errors").update("\n".join(f"{where}: {text}" for where, text in errors))

    @on(Button.Pressed, "#cfg-check")
    def _check_pressed(self) -> None:
        if self.check() is not None:
            self.notify("the configuration is valid")

    # ---------------------------------------------------------------------------------------------------- review

    @on(Button.Pressed, "#cfg-review")
    def action_review(self) -> None:
        config = self.check()
        if config is None:
            self.action_pane("configure")
            return
        self.plan = None
        review = self.query_one(ReviewPane)
        review.query_one("#review-launch", Button).disabled = True
        review.query_one("#review-error").update("")
        review.query_one("#review-body").update("quoting and writing the plan...")
        self.action_pane("review")
        self._prepare(config)

    @work(thread=True, exclusive=True, group="review")
    def _prepare(self, config: dict[str, Any]) -> None:
        quote, plan, error = None, None, None
        try:
            quote = actions.quote(config)
            if quote["refusal"] is None:
                plan = actions.prepare(config, self.workspace)
        except Exception as exc:  # noqa: BLE001 - shown on the Review pane; nothing is launched
            error = actions.message(exc)
        self.call_from_thread(self._reviewed, quote, plan, error or (quote or {}).get("refusal"))

    def _reviewed(self, quote, plan, error) -> None:
        review = self.query_one(ReviewPane)
        review.show(quote, plan, self.workspace)
        review.query_one("#review-error").update(f"refused: {error}; nothing was written or launched" if error
                                                 and not plan else (error or ""))
        self.plan = plan
        review.query_one("#review-launch", Button).disabled = plan is None

    # --------------------------------------------------------------------------------------------- launch, watch

    @on(Button.Pressed, "#review-launch")
    def action_launch(self) -> None:
        if self.plan is None:
            self.notify("review a plan first (ctrl+r)", severity="warning")
            return
        self.query_one("#review-launch", Button).disabled = True
        self._launch(Path(self.plan["_workspace"]))

    @work(thread=True, exclusive=True, group="launch")
    def _launch(self, plan_dir: Path) -> None:
        from ..remote import state

        run_id = actions.load_plan_id(plan_dir)
        record = state.load_record(run_id) or {}
        try:
            if record.get("phase") in state.FINAL_PHASES:
                note = f"run {run_id} is already {record['phase']}: watching it (a stopped run resumes with ctrl+g)"
            else:
                record = actions.launch(plan_dir, self.workspace)
                note = (f"attached to the existing job {record['job'].get('job_id')} of run {run_id}"
                        if record.get("attached") else f"launched run {run_id}")
        except Exception as exc:  # noqa: BLE001
            self.call_from_thread(self._launch_failed, actions.message(exc))
            return
        self.call_from_thread(self._launched, run_id, note)

    def _launch_failed(self, text: str) -> None:
        self.query_one("#review-error").update(f"launch refused: {text}")
        self.query_one("#review-launch", Button).disabled = self.plan is None

    def _launched(self, run_id: str, note: str) -> None:
        self.notify(note)
        self.query_one("#review-error").update(note)
        self.watch_run(run_id=run_id)

    def watch_run(self, *, run_id: str | None = None, run_dir: Path | None = None) -> None:
        if self.feed is not None:
            self.feed.close()
        self.feed = RunFeed(run_id=run_id, run_dir=run_dir)
        if run_id is not None:
            _daemon(self._follow, run_id)
        self.action_pane("watch")
        self._tick()

    def _follow(self, run_id: str) -> None:
        """The watchdog and collection `train-remote --attach` runs (once per run in this app). A daemon thread,
        not a worker: quitting leaves the run running (attach again later), it never waits for the run's end."""
        from ..remote import state

        if run_id in self.followed or (state.load_record(run_id) or {}).get("phase") in state.FINAL_PHASES:
            return
        self.followed.add(run_id)
        try:
            actions.follow(run_id, poll_s=self.poll_s)
        except Exception as exc:  # noqa: BLE001
            self._say(f"{run_id}: {actions.message(exc)}", severity="error")

    def _tick(self) -> None:
        # One poll at a time: on a slow machine a poll can outlast the interval, and overlapping polls race on the
        # feed's event list and pile up threads (an exclusive worker would cancel each before it reports).
        if self.feed is not None and not self._polling.locked():
            self._polling.acquire()
            self._poll(self.feed)

    @work(thread=True, group="poll")
    def _poll(self, feed: RunFeed) -> None:
        try:
            snap = feed.poll()
        except Exception as exc:  # noqa: BLE001 - a poll that failed says so; the next one tries again
            from .feed import Snapshot

            snap = Snapshot(error=actions.message(exc))
        finally:
            self._polling.release()
        self.call_from_thread(self._show, feed, snap)

    def _show(self, feed: RunFeed, snap) -> None:
        if feed is not self.feed:
            return
        live = feed.run_id is not None and snap.phase in ("pending", "running", "launching")
        whole = [c for c in snap.checkpoints if c.get("complete")]
        title = feed.run_id or actions.rel(feed.run_dir, self.workspace)
        try:
            self.query_one(WatchPane).show(title, snap, can_stop=live and not self.stopping,
                                           can_resume=feed.run_id is not None and snap.phase == "stopped"
                                           and bool(whole))
        except NoMatches:  # a poll that returned while the app closes
            return

    @on(Button.Pressed, "#watch-stop")
    def action_stop(self) -> None:
        if self.feed is None or self.feed.run_id is None:
            self.notify("no run to stop: a run directory alone is read, not controlled", severity="warning")
            return
        self.stopping = True
        self.query_one("#watch-stop", Button).disabled = True
        _daemon(self._stop, self.feed.run_id)

    def _stop(self, run_id: str) -> None:  # a daemon thread, as `_follow`
        try:
            result = actions.stop(run_id)
            point = result.get("checkpoint")
            text = (f"stopped {run_id}" + (f" at checkpoint step {point['step']}" if point else
                                           " (no checkpoint saved)") if result.get("requested") else
                    f"{run_id}: no stop requested ({result.get('message') or 'the job is not running'})")
        except Exception as exc:  # noqa: BLE001
            text = f"stop failed: {actions.message(exc)}"
        self.stopping = False
        self._say(text)

    def _say(self, text: str, severity: str = "information") -> None:
        """A notification from a daemon thread (nothing when the app has closed meanwhile)."""
        try:
            self.call_from_thread(self.notify, text, severity=severity)
        except RuntimeError:
            pass

    @on(Button.Pressed, "#watch-resume")
    def action_resume(self) -> None:
        snap = self.query_one(WatchPane).snapshot
        if self.feed is None or self.feed.run_id is None or snap is None or snap.phase != "stopped":
            self.notify("resume continues a stopped run (stop one first)", severity="warning")
            return
        whole = [c for c in snap.checkpoints if c.get("complete")]
        if not whole:
            self.notify("the run saved no complete checkpoint to continue from", severity="warning")
            return
        self._resume(self.feed.run_id, int(whole[-1]["step"]))

    @work(thread=True, exclusive=True, group="review")
    def _resume(self, run_id: str, step: int) -> None:
        plan, error = None, None
        try:
            plan = actions.prepare_resume(run_id, step, self.workspace)
        except Exception as exc:  # noqa: BLE001
            error = actions.message(exc)
        self.call_from_thread(self._reviewed, None, plan, error)
        self.call_from_thread(self.action_pane, "review")

    @on(Button.Pressed, "#watch-curve")
    def action_next_curve(self) -> None:
        self.query_one(WatchPane).next_curve()

    @on(Button.Pressed, "#watch-attach-button")
    @on(Input.Submitted, "#watch-attach")
    def action_attach(self) -> None:
        target = self.query_one("#watch-attach", Input).value.strip()
        if target:
            self.attach(target)

    def attach(self, target: str) -> None:
        """A run directory (any run, `train`'s included; one a recorded run writes to is followed by its id) or a
        run id."""
        from ..remote import state

        path = Path(target).expanduser()
        run_id = actions.run_for_dir(path)  # its directory appears only when the run is collected
        if run_id:
            self.watch_run(run_id=run_id)
        elif path.is_dir():
            self.watch_run(run_dir=path)
        elif state.load_record(target):
            self.watch_run(run_id=target)
        else:
            self.notify(f"{target}: neither a run directory nor a run id recorded here", severity="error")


def _number(raw: str, where: str, problems: list[tuple[str, str]]) -> int | float | None:
    text = raw.strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        problems.append((where, f"not a number: {text!r}"))
        return None


def _daemon(target, *args) -> None:
    threading.Thread(target=target, args=args, daemon=True).start()


def run(workspace: Path, attach: str | None = None) -> None:
    StudioApp(workspace, attach=attach).run()
