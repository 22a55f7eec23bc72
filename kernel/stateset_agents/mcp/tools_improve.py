"""The file tools: ingest, improve (run, status, audit, calibrate), nominate, lineage, report, plugins_list. Each
calls the pipeline function its CLI command calls."""
from __future__ import annotations

from typing import Any

from .tools import (ANY_LIST, ANY_OBJECT, REWARD_ARGS, Call, Tool, boolean, integer, number, obj, path, paths,
                    reward_of, string)


def _ingest(call: Call) -> dict[str, Any]:
    from ..core.errors import StatesetError
    from ..pipeline.ingest import run_ingest

    def progress(update: dict[str, Any]) -> None:
        call.progress(update["file_index"], update["files"], f"{update['path']}: {update['written']} written")

    summary = run_ingest(call.args["format"], call.path("input"), call.path("output"),
                         redact=call.get("redact", False), progress=progress)
    if summary["written"] == 0:
        raise StatesetError(f"nothing could be ingested; see {call.args['output']}/rejects.jsonl for why")
    return summary


def _improve_run(call: Call) -> dict[str, Any]:
    from ..pipeline import improve

    return improve.run_improve(
        call.path("transcripts"), call.get("reward"), call.path("output"),
        threshold=call.get("threshold", improve.DEFAULT_THRESHOLD), policy=call.path("policy"),
        held_out_fraction=call.get("held_out", improve.DEFAULT_HELD_OUT),
        base_model=call.get("base_model", improve.DEFAULT_BASE_MODEL),
        batch_size=call.get("batch_size", improve.DEFAULT_BATCH), reward_config=call.path("reward_config"),
        on_progress=lambda done: call.progress(done["conversations"], None, f"{done['turns']} turns graded"))


def _improve_status(call: Call) -> dict[str, Any]:
    from ..pipeline.improve import read_summary

    return read_summary(call.path("directory"))


def _improve_audit(call: Call) -> dict[str, Any]:
    from ..core.errors import InputError

    if call.get("robustness", False):
        from ..pipeline.robustness import parse_kinds, run_robustness

        given = [k for k in ("graded", "labels", "label_key") if call.args.get(k) is not None]
        if given:
            raise InputError(f"robustness grades the transcripts itself: give transcripts and reward, not "
                             f"{', '.join(given)}", field=given[0])
        if call.args.get("transcripts") is None:
            raise InputError("robustness needs transcripts (a folder written by `ingest`)", field="transcripts")
        kinds = call.get("kinds")
        parse_kinds(kinds)  # a bad name fails before the reward is built
        reward, config = reward_of(call)
        return run_robustness(call.path("transcripts"), reward, config, kinds=kinds, seed=call.get("seed", 0),
                              examples=call.get("examples", 3), output=call.path("output"),
                              limit=call.get("limit"), decisions_only=call.get("decisions_only", False),
                              on_progress=lambda done, total: call.progress(done, total, "conversations graded"))
    from ..pipeline.audit import run_audit
    from ..pipeline.improve import DEFAULT_THRESHOLD

    given = [k for k in ("reward", "policy", "reward_config", "kinds", "output", "limit", "decisions_only")
             if call.args.get(k) is not None]
    if given:
        raise InputError(f"{', '.join(given)}: only with robustness (a label audit reads the grades in graded)",
                         field=given[0])
    if call.args.get("graded") is None:
        raise InputError("give graded (graded.jsonl from `improve_run`), or robustness: true", field="graded")
    labels, transcripts, key = (call.args.get(k) for k in ("labels", "transcripts", "label_key"))
    _labels_given(call, (labels is None) != (transcripts is None) and not (transcripts is not None and not key))
    return run_audit(call.path("graded"), labels=call.path("labels"), transcripts=call.path("transcripts"),
                     label_key=call.get("label_key"), rollup=call.get("rollup", "mean"),
                     threshold=call.get("threshold", DEFAULT_THRESHOLD), top=call.get("top", 10),
                     draws=call.get("draws", 2000))


def _labels_given(call: Call, ok: bool) -> None:
    """The pipeline's rule for where labels come from (labels, or transcripts with label_key), refused here with
    the field it concerns: the pipeline's own message names none."""
    from ..core.errors import InputError

    if not ok:
        raise InputError("give labels either as labels (a file) or as transcripts with label_key",
                         field="labels" if call.args.get("labels") is not None else "label_key")


def _improve_calibrate(call: Call) -> dict[str, Any]:
    from ..pipeline.calibrate import run_calibrate

    labels, transcripts, key = (call.args.get(k) for k in ("labels", "transcripts", "label_key"))
    if call.get("folds", 5) >= 2:  # the pipeline's folds check (with its field) comes first
        _labels_given(call, (labels is None) != (key is None) and not (key is not None and transcripts is None))
    return run_calibrate(call.path("graded"), call.path("output"), labels=call.path("labels"),
                         transcripts=call.path("transcripts"), label_key=call.get("label_key"),
                         group_key=call.get("group_key"), reward_config=call.path("reward_config"),
                         policy=call.path("policy"), folds=call.get("folds", 5), seed=call.get("seed", 0),
                         draws=call.get("draws", 2000))


def _nominate(call: Call) -> dict[str, Any]:
    from ..pipeline.nomination import nominate

    return nominate(call.path("run"), call.args["checkpoint"])


def _lineage(call: Call) -> dict[str, Any]:
    from ..pipeline.lineage import adapters_trained_on, trace

    targets = call.paths("targets")
    if call.get("conversation") is not None:
        return {"conversation": call.args["conversation"], "adapters": adapters_trained_on(targets,
                                                                                          call.args["conversation"])}
    results = [trace(t) for t in targets]
    for result in results:  # a changed sha256 is a failure, as `lineage` exits 4
        result.raise_if_broken()
    return {"chains": [r.as_dict() for r in results]}


def _report(call: Call) -> dict[str, Any]:
    from ..pipeline.report import write_report

    return {"path": str(write_report(call.path("run")))}


def _plugins_list(call: Call) -> dict[str, Any]:
    from ..core.registry import get_registry
    from ..core.runtimes.container import image_for

    registry = get_registry()
    rows = []
    for spec in registry.all(call.get("kind")):
        found = image_for(spec)
        rows.append({**spec.as_row(), "image": found[1].get("tag") if found else None})
    return {"components": rows, "plugin_load_errors": registry.load_errors}


SUMMARY_OUT = obj(("counts", "train_command", "output_dir"), counts=ANY_OBJECT, scores=ANY_OBJECT,
                  reward=ANY_OBJECT, train_command={"type": "string"}, output_dir={"type": "string"})

TOOLS = [
    Tool("ingest", "Turn conversation logs into transcripts (`stateset-agents ingest`): OUTPUT/transcripts.jsonl, "
                   "rejects.jsonl (each bad line with its line number and reason) and ingest_summary.json.",
         {"format": string("Log format: an installed ingestor (`plugins_list` kind ingestor)."),
          "input": path("A .jsonl / .jsonl.gz file, or a folder of them"),
          "output": path("Folder for transcripts.jsonl, rejects.jsonl and ingest_summary.json"),
          "redact": boolean("Replace e-mail addresses, phone, card and IBAN numbers, IPs and SSNs with placeholders.")},
         ("format", "input", "output"),
         obj(("read", "written", "rejected"), read={"type": "integer"}, written={"type": "integer"},
             rejected={"type": "integer"}, duplicates={"type": "integer"}, rejected_by_reason=ANY_OBJECT),
         _ingest, lambda r: f"ingested {r['written']} conversations from {r['read']} lines ({r['rejected']} rejected)"),
    Tool("improve_run", "Grade every assistant turn with a reward and curate the best into a training set "
                        "(`improve run`): graded.jsonl, curated.jsonl, validation.jsonl, test.jsonl, "
                        "improve_summary.json, next_steps.md (with the exact train command).",
         {"transcripts": path("Folder written by `ingest`"),
          "output": path("Folder for graded.jsonl, curated.jsonl and the summary"), **REWARD_ARGS,
          "threshold": number("Curate applicable turns scoring at least this (default 0.7)."),
          "held_out": number("Share of groups for validation, and again for test (default 0.1; 0: none).",
                             minimum=0, maximum=0.45),
          "base_model": string("Base model named in the train command."),
          "batch_size": integer("Conversations per grading call.", 1)},
         ("transcripts", "output"), SUMMARY_OUT, _improve_run,
         lambda r: f"curated {r['counts']['curated']} turns; next: {r['train_command']}"),
    Tool("improve_status", "What an `improve run` produced: its improve_summary.json (`improve status --json`).",
         {"directory": path("An `improve run` output folder")}, ("directory",), SUMMARY_OUT, _improve_status,
         lambda r: f"{r['counts']['curated']} curated turns; train with: {r['train_command']}"),
    Tool("improve_audit", "How well the reward tracks a label you trust (ROC AUC, Spearman, confusion table, a length "
                          "baseline), or with robustness: true, whether it scores broken replies (loops, word salad, "
                          "off-topic, invented tool arguments) below real ones (`improve audit [--robustness]`).",
         {"graded": path("graded.jsonl from `improve_run` (label audit)"),
          "labels": path('File of {"id", "label"} lines'),
          "transcripts": path("Ingest folder: labels in metadata (with label_key), or the conversations to break"),
          "label_key": string("Metadata key holding the label."),
          "rollup": string("A conversation's score: mean or min of its applicable turns.", enum=["mean", "min"]),
          "threshold": number("The curation threshold, for the confusion table."),
          "top": integer("How many disagreements to list.", 0), "draws": integer("Bootstrap draws (0: none).", 0),
          "robustness": boolean("Break the transcripts' replies and calls on purpose instead."), **REWARD_ARGS,
          "kinds": string("With robustness: breakages to run, comma-separated (default all)."),
          "seed": integer("With robustness: seed of the breakages."),
          "examples": integer("With robustness: fooling cases to show per kind.", 0),
          "output": path("With robustness: also write the report here"),
          "decisions_only": boolean("With robustness: count only the copies that change a write or hand-off call "
                                    "(the decisions a policy reward judges)."),
          "limit": integer("With robustness: the first N conversations only.", 1)},
         (), ANY_OBJECT, _improve_audit,
         lambda r: (f"robustness: weakest {r.get('weakest')}" if "kinds" in r else
                    f"ROC AUC {(r.get('auc') or {}).get('value')} over {(r.get('counts') or {}).get('matched')} "
                    "conversations")),
    Tool("improve_calibrate", "Fit the weights of a reward's checks to your labels under grouped cross-validation, "
                              "report out-of-fold AUC, write a reward config (`improve calibrate`).",
         {"graded": path("graded.jsonl from `improve_run`"), "output": path("The reward config to write (.yaml/.json)"),
          "labels": path('File of {"id", "label"} lines'),
          "transcripts": path("Ingest folder: message counts, the group key (and labels, with label_key)"),
          "label_key": string("Metadata key holding the label."),
          "group_key": string("Metadata key whose conversations share a fold."),
          "reward_config": path("The reward config the rows were graded with"),
          "policy": path("The policy file the rows were graded with"), "folds": integer("Folds.", 2),
          "seed": integer("Seed."), "draws": integer("Bootstrap draws (0: none).", 0)},
         ("graded", "output"), obj(("output", "calibration", "measured"), output={"type": "string"},
                                   calibration=ANY_OBJECT, measured=ANY_OBJECT), _improve_calibrate,
         lambda r: f"calibrated AUC {r['measured']['calibrated'].get('auc')}; wrote {r['output']}"),
    Tool("nominate", "Record the checkpoint to test, chosen on validation (`nominate RUN --checkpoint K`).",
         {"run": path("A run directory"), "checkpoint": integer("The checkpoint's step (manifest.json `selection`).", 0)},
         ("run", "checkpoint"), obj(("step", "adapter"), step={"type": "integer"}, adapter=ANY_OBJECT), _nominate,
         lambda r: f"nominated checkpoint {r['step']} (adapter sha256 {r['adapter']['sha256']})"),
    Tool("lineage", "Walk adapters back to their log lines, verifying every recorded sha256 (`lineage`); with "
                    "conversation: which adapters trained on it.",
         {"targets": paths("Run directories or registry entries (or folders of them)"),
          "conversation": string("Which adapters did this conversation train?")},
         ("targets",), obj((), chains=ANY_LIST, adapters=ANY_LIST, conversation={"type": "string"}), _lineage,
         lambda r: (f"{len(r['adapters'])} adapter(s) trained on {r['conversation']}" if "adapters" in r else
                    f"{len(r['chains'])} chain(s), every sha256 verified")),
    Tool("report", "Write RUN/report.html: curves, score distributions, per-case changes, lineage (`report`).",
         {"run": path("A run directory")}, ("run",), obj(("path",), path={"type": "string"}), _report,
         lambda r: f"wrote {r['path']}"),
    Tool("plugins_list", "Every installed component: kind, name, version, package, whether it is available (or "
                         "the command that installs what it lacks) (`plugins list --json`).",
         {"kind": string("Only this kind.", enum=["ingestor", "reward", "trainer", "evaluator", "provider"])}, (),
         obj(("components",), components={"type": "array", "items": obj(("component", "available"))},
             plugin_load_errors=ANY_OBJECT), _plugins_list, lambda r: f"{len(r['components'])} components"),
]
