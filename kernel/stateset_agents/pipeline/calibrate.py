"""`improve calibrate`: fit the weights of a reward's checks to a team's labels, under grouped cross-validation.

Model (what the kernel applies, `calibration.py`): each applicable turn is re-scored as
`sigmoid(intercept + sum_f weights[f] * x_f)`, where x_f is the turn's top-level numeric breakdown entry f (a bool
counts 0/1) or `fill[f]` when the turn did not judge f; a conversation's score is the mean of its turns' scores.

Fitting: an L2-regularised logistic regression over turn rows, each carrying its conversation's label with weight
1/(applicable turns), so every conversation counts once. Checks are scaled to unit deviation for the penalty, or
(scaling "reward") those scored like the reward (values in [0, 1]) kept on that scale; the weights are written
back on the breakdown's own scale. `fill[f]` follows a fill rule: "passed" (1 for a [0, 1] check: a reward leaves
a check out of a turn where there was nothing to judge) or "mean" (its mean where judged). The solver is Newton's
method with step halving (deterministic, no dependency). The penalty strength C (loss + |w|^2 / 2C, as sklearn's
C), the fill rule and the scaling are chosen from `C_GRID` x `FILL_RULES` x `SCALINGS` by an inner grouped
cross-validation inside the data being fitted: the settings whose inner out-of-fold conversation scores have the
highest pooled AUC (ties: lower log loss, stronger penalty).

Validity is measured the way it will be judged: the folds are grouped (a task's trials never straddle folds) and
stratified, and each conversation is scored by a model fitted without its fold (its settings chosen without it
too). Reported: the pooled out-of-fold ROC AUC with a group-clustered bootstrap interval, beside the reward's own
(uncalibrated) score and the length-only baseline on the same conversations, and every fold's AUC.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..core._version import __version__
from ..core.calibration import CALIBRATION_KEY, REWARD_FILE_SCHEMA, calibrated_score, resolve_reward, split_config
from ..core.errors import InputError
from ..core.jsonio import digest, read_jsonl, sha256_file, write_text
from ..plugin_api.stats import group_bootstrap_auc_interval, grouped_stratified_folds, out_of_fold_auc, roc_auc
from .audit import BINARISE_AT, _check_grade_row, read_label_file, read_label_key
from .improve import load_policy, transcripts_path

METHOD = "logistic-l2"
C_GRID = (0.01, 0.1, 1.0, 10.0, 100.0)
FILL_RULES = ("passed", "mean")
#: How checks are scaled for the penalty: every one to unit deviation, or those scored like the reward kept on [0, 1].
SCALINGS = ("deviation", "reward")
#: Used when the data are too few to choose C by an inner cross-validation.
FALLBACK_C = 1.0
MIN_PER_CLASS = 20
#: What a conversation without an applicable turn scores (docs/rewards.md): neutral, no evidence either way.
NO_APPLICABLE_TURN_SCORE = 0.5
DEFAULT_FOLDS = 5
DEFAULT_GROUP_KEY = "task_id"
_DIGITS = 12  # significant digits written: the file's bytes do not hang on the last bit of a float


class GradedTurns:
    """What calibration needs of graded.jsonl: each conversation's applicable turns (breakdown and the reward's
    own score), its last graded turn, and the one reward identity every row carries."""

    def __init__(self, keep: set[str] | None = None):
        self.keep = keep  # the conversations whose turns are kept (None: all); the others are only counted
        self.applicable: set[str] = set()
        self.breakdowns: dict[str, list[dict[str, Any]]] = {}
        self.scores: dict[str, list[float]] = {}
        self.last_turn: dict[str, int] = {}
        self.identity: dict[str, Any] | None = None
        self.rows = 0

    def add(self, cid: str, turn: int, applicable: bool, score: float, breakdown: Mapping[str, Any]) -> None:
        self.rows += 1
        self.last_turn[cid] = max(self.last_turn.get(cid, -1), turn)
        if applicable:
            self.applicable.add(cid)
            if self.keep is None or cid in self.keep:
                self.breakdowns.setdefault(cid, []).append(dict(breakdown))
                self.scores.setdefault(cid, []).append(score)


def read_graded_turns(path: str | os.PathLike, keep: set[str] | None = None) -> GradedTurns:
    """graded.jsonl, each row checked as `improve audit` checks it, plus its breakdown and reward identity; the
    applicable turns of the conversations in `keep` (default all) are kept (a large log, a few labels)."""
    shown = str(path)
    graded = GradedTurns(keep)
    for line, row in read_jsonl(path, display=shown):
        cid, turn, score, applicable = _check_grade_row(row, shown, line)
        reward = row.get("reward")
        if not isinstance(reward, dict) or not isinstance(reward.get("name"), str) or not reward["name"]:
            raise InputError("expected the reward's identity (name, version, config_sha256)", path=shown, line=line,
                             field="reward")
        if not isinstance(reward.get("config_sha256"), str):
            raise InputError("expected the sha256 of the config the reward graded with", path=shown, line=line,
                             field="reward.config_sha256")
        if graded.identity is None:
            graded.identity = dict(reward)
        elif reward != graded.identity:
            raise InputError(f"graded by {reward} but earlier rows by {graded.identity}: calibrate one reward and "
                             "config at a time", path=shown, line=line, field="reward")
        breakdown = row.get("breakdown")
        if breakdown is None:
            breakdown = {}
        if not isinstance(breakdown, dict):
            raise InputError("expected an object (the per-check breakdown)", path=shown, line=line, field="breakdown")
        own = row.get("uncalibrated_score", score)  # graded with a calibration already: the reward's own score
        if isinstance(own, bool) or not isinstance(own, (int, float)) or not 0.0 <= own <= 1.0:
            raise InputError("expected a score in [0, 1]", path=shown, line=line, field="uncalibrated_score")
        graded.add(cid, turn, applicable, float(own), breakdown)
    if graded.identity is None:
        raise InputError("no grade rows in this file", path=shown)
    return graded


# ------------------------------------------------------------------------------------------------------ the model


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def numeric_checks(conversations: Sequence[Sequence[Mapping[str, Any]]]) -> list[str]:
    """The top-level breakdown keys that hold a number (or a bool) in at least one turn, sorted."""
    return sorted({k for turns in conversations for b in turns for k, v in b.items() if _number(v) is not None})


def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def _softplus(z: float) -> float:
    return max(z, 0.0) + math.log1p(math.exp(-abs(z)))


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (the Hessian is small and positive definite)."""
    n = len(vector)
    a = [row[:] + [vector[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[pivot] = a[pivot], a[col]
        if abs(a[col][col]) < 1e-300:
            raise ValueError("singular system")
        for r in range(col + 1, n):
            factor = a[r][col] / a[col][col]
            if factor:
                for c in range(col, n + 1):
                    a[r][c] -= factor * a[col][c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (a[r][n] - sum(a[r][c] * x[c] for c in range(r + 1, n))) / a[r][r]
    return x


def fit_logistic(rows: Sequence[tuple[Sequence[float], float, float]], C: float, *,
                 start: Sequence[float] | None = None, max_iter: int = 100) -> list[float]:
    """[intercept, w_1..w_p] minimising sum_i w_i * logloss(y_i, x_i) + |w|^2 / (2C) (intercept unpenalised), by
    Newton's method with step halving, from `start` when given. rows: (x, y in {0, 1}, weight). Rows are walked
    by their non-zero entries, so a row costs (non-zeros)^2, not p^2."""
    p = len(rows[0][0])
    wsum = math.fsum(w for _, _, w in rows)
    wpos = math.fsum(w * y for _, y, w in rows)
    if not 0 < wpos < wsum:
        raise ValueError("a logistic fit needs both classes")
    # Index 0 is the intercept's constant 1; feature j is index j + 1.
    sparse = [(((0, 1.0),) + tuple((j + 1, v) for j, v in enumerate(x) if v), y, w) for x, y, w in rows]
    rate = wpos / wsum
    theta = list(start) if start is not None else [math.log(rate / (1 - rate))] + [0.0] * p
    penalty = 1.0 / C

    def objective(t: list[float]) -> float:
        total = 0.0
        for pairs, y, w in sparse:
            eta = sum(t[j] * v for j, v in pairs)
            total += w * (_softplus(eta) - y * eta)
        return total + 0.5 * penalty * sum(b * b for b in t[1:])

    current = objective(theta)
    for _ in range(max_iter):
        grad = [0.0] * (p + 1)
        hess = [[0.0] * (p + 1) for _ in range(p + 1)]
        for pairs, y, w in sparse:
            prob = _sigmoid(sum(theta[j] * v for j, v in pairs))
            r, s = w * (prob - y), w * prob * (1 - prob)
            for a, va in pairs:
                grad[a] += r * va
                sa = s * va
                row = hess[a]
                for b, vb in pairs:
                    row[b] += sa * vb
        for j in range(1, p + 1):
            grad[j] += penalty * theta[j]
            hess[j][j] += penalty
        step = _solve(hess, grad)
        t = 1.0
        while True:
            candidate = [v - t * d for v, d in zip(theta, step)]
            value = objective(candidate)
            if value <= current or t < 1e-10:
                break
            t *= 0.5
        moved = max(abs(t * d) for d in step)
        theta, current = candidate, value
        if moved < 1e-10:
            break
    return theta


def _round(x: float) -> float:
    return float(f"{x:.{_DIGITS}g}")


def fill_value(values: Sequence[float], weights: Sequence[float], rule: str) -> float:
    """What a turn that did not judge a check counts as, by `rule`:

    * "passed": a check scored like the reward (every value in [0, 1], 1 = fine) that a reward leaves out of a
      turn had nothing wrong to judge there ("only when relevant"), so it counts as 1; other checks as "mean".
    * "mean": the conversation-weighted mean of the check where it was judged (it tells nothing either way).
    """
    if rule == "passed" and all(0.0 <= v <= 1.0 for v in values):
        return 1.0
    return math.fsum(v * w for v, w in zip(values, weights)) / math.fsum(weights)


def encode(conversations: Sequence[Sequence[Mapping[str, Any]]], features: Sequence[str]
           ) -> list[list[tuple[float | None, ...]]]:
    """Each turn's breakdown as a tuple of its checks' values in `features` order (None: not judged), read once
    so that the many fits of a cross-validation do not read the breakdowns again."""
    return [[tuple(_number(b.get(f)) for f in features) for b in turns] for turns in conversations]


def fit_calibration(conversations: Sequence[Sequence[Mapping[str, Any]]], labels: Sequence[bool],
                    features: Sequence[str], C: float, fill_rule: str = "passed", scaling: str = "deviation",
                    start: Sequence[float] | None = None) -> dict[str, Any]:
    """The calibration mapping (method, features, intercept, weights, fill) fitted on these conversations, plus
    `standardised_weights` (per standard deviation: comparable across checks), `dropped` (checks constant here)
    and `theta` (the solver's solution, a warm `start` for the next C on the same data)."""
    return _fit(encode(conversations, features), labels, features, C, fill_rule, scaling, start)


def _fit(encoded, labels, features, C, fill_rule, scaling, start=None) -> dict[str, Any]:
    weight_of = [1.0 / len(turns) for turns in encoded]
    fill: dict[str, float] = {}
    for j, f in enumerate(features):
        seen = [(t[j], w) for turns, w in zip(encoded, weight_of) for t in turns if t[j] is not None]
        if seen:
            fill[f] = fill_value([v for v, _ in seen], [w for _, w in seen], fill_rule)
    columns = [j for j, f in enumerate(features) if f in fill]
    fills = [fill[features[j]] for j in columns]
    # Identical (x, y) rows add up: the loss depends on nothing else, and the data shrink to a few distinct rows.
    merged: dict[tuple, float] = {}
    for turns, y, w in zip(encoded, labels, weight_of):
        for t in turns:
            key = (tuple(fv if t[j] is None else t[j] for j, fv in zip(columns, fills)), float(bool(y)))
            merged[key] = merged.get(key, 0.0) + w
    keys = sorted(merged)  # a fixed order: the sums, and so the fit, do not hang on the input's order
    total = math.fsum(merged.values())
    scale, deviation, kept = {}, {}, []
    for c, j in enumerate(columns):
        m = math.fsum(k[0][c] * merged[k] for k in keys) / total
        sd = math.sqrt(math.fsum((k[0][c] - m) ** 2 * merged[k] for k in keys) / total)
        if sd > 1e-12:
            # "deviation": unit deviation, so the penalty treats checks alike (ridge's usual choice). "reward": a
            # check scored like the reward (in [0, 1]) keeps that scale, so the penalty prices a full pass-fail
            # swing alike for every check and a rarely failed check (little evidence) is shrunk more; other checks
            # (counts, signed values) are still scaled to unit deviation.
            unit = scaling == "reward" and all(0.0 <= k[0][c] <= 1.0 for k in keys)
            scale[features[j]], deviation[features[j]] = (1.0 if unit else sd), sd
            kept.append(c)
    if not kept:
        raise ValueError("every check is constant on these conversations: nothing to weight")
    names = [features[columns[c]] for c in kept]
    # Shifted so a check the turn did not judge is 0: rows stay sparse. The shift moves only the unpenalised
    # intercept, not the fit.
    rows = [([(k[0][c] - fills[c]) / scale[features[columns[c]]] for c in kept], k[1], merged[k]) for k in keys]
    theta = fit_logistic(rows, C, start=start if start is not None and len(start) == len(names) + 1 else None)
    weights = {f: theta[i + 1] / scale[f] for i, f in enumerate(names)}
    intercept = theta[0] - math.fsum(theta[i + 1] * fill[f] / scale[f] for i, f in enumerate(names))
    return {
        "method": METHOD, "features": names, "intercept": _round(intercept),
        "weights": {f: _round(weights[f]) for f in names}, "fill": {f: _round(fill[f]) for f in names},
        "standardised_weights": {f: _round(weights[f] * deviation[f]) for f in names},
        "dropped": [f for f in features if f not in names], "theta": theta,
    }


def conversation_score(calibration: Mapping[str, Any], turns: Sequence[Mapping[str, Any]]) -> float:
    """Exactly what the kernel will make of a conversation: the mean of its calibrated turn scores."""
    return math.fsum(calibrated_score(calibration, b) for b in turns) / len(turns)


def _encoded_score(calibration: Mapping[str, Any], turns, features: Sequence[str]) -> float:
    """`conversation_score` from encoded turns (the same sums in the same order, so the same value)."""
    at = {f: j for j, f in enumerate(features)}
    used = [(at[f], float(calibration["weights"][f]), float(calibration["fill"][f])) for f in calibration["features"]]
    intercept = float(calibration["intercept"])
    scores = []
    for t in turns:
        z = intercept + sum(w * (fv if t[j] is None else t[j]) for j, w, fv in used)
        scores.append(_sigmoid(z))
    return math.fsum(scores) / len(turns)


def _log_loss(score: float, y: bool) -> float:
    p = min(max(score, 1e-12), 1 - 1e-12)
    return -math.log(p if y else 1 - p)


def choose_settings(conversations, labels, groups, features, *, folds: int, seed: int
                    ) -> tuple[dict[str, Any], str]:
    """({C, fill_rule, scaling}, how they were chosen): the settings from C_GRID x FILL_RULES x SCALINGS whose
    out-of-fold conversation scores in an inner grouped cross-validation rank conversations best (pooled ROC AUC:
    the figure calibration is judged by; ties: lower log loss, then the stronger penalty, then the earlier rule and
    scaling), or the fallbacks with the reason when these data cannot be split that way. `conversations` all hold
    an applicable turn."""
    fallback = {"C": FALLBACK_C, "fill_rule": FILL_RULES[0], "scaling": SCALINGS[0]}
    encoded = encode(conversations, features)
    k = min(folds, len(set(groups)))
    if k < 2:
        return fallback, "fixed: fewer than 2 groups to choose by"
    assignment = grouped_stratified_folds(groups, labels, k, seed=seed)
    splits = [([i for i, g in enumerate(assignment) if g != f], [i for i, g in enumerate(assignment) if g == f])
              for f in range(k)]
    rank = {}
    try:
        for rule in FILL_RULES:
            for scaling in SCALINGS:
                warm: list = [None] * k  # each split's last solution starts the next C (C ascends: small steps)
                for C in C_GRID:
                    scores = [0.0] * len(conversations)
                    for f, (train, test) in enumerate(splits):
                        cal = _fit([encoded[i] for i in train], [labels[i] for i in train], features, C, rule,
                                   scaling, warm[f])
                        warm[f] = cal["theta"]
                        for i in test:
                            scores[i] = _encoded_score(cal, encoded[i], features)
                    loss = math.fsum(_log_loss(p, y) for p, y in zip(scores, labels)) / len(scores)
                    rank[C, rule, scaling] = (-round(roc_auc(scores, labels), 12), round(loss, 12), C,
                                              FILL_RULES.index(rule), SCALINGS.index(scaling))
    except ValueError as exc:  # a training split with one class, or with every check constant
        return fallback, f"fixed: the inner cross-validation could not fit ({exc})"
    C, rule, scaling = min(rank, key=rank.__getitem__)
    return {"C": C, "fill_rule": rule, "scaling": scaling}, (
        f"inner {k}-fold grouped cross-validation: highest pooled out-of-fold AUC (then lowest log loss) over C in "
        f"{list(C_GRID)} x fill in {list(FILL_RULES)} x scaling in {list(SCALINGS)}")


def cross_validate(conversations, labels, groups, features, *, folds: int, seed: int) -> dict[str, Any]:
    """Out-of-fold calibrated conversation scores: fold f is scored by a calibration fitted (C and fill chosen
    too) on the other folds only. `conversations`: each one's applicable turns' breakdowns (a conversation
    without one is fitted on by nothing and scores the training folds' positive rate)."""
    assignment = grouped_stratified_folds(groups, labels, folds, seed=seed)
    scores = [0.0] * len(conversations)
    per_fold = []
    for f in range(folds):
        train = [i for i, g in enumerate(assignment) if g != f and conversations[i]]
        test = [i for i, g in enumerate(assignment) if g == f]
        sub = ([conversations[i] for i in train], [labels[i] for i in train], [groups[i] for i in train])
        settings, _ = choose_settings(*sub, features, folds=folds - 1, seed=seed)
        cal = fit_calibration(sub[0], sub[1], features, **settings)
        # A calibrated score is a probability of the label: with no applicable turn (no evidence) a conversation
        # scores the prior, the training folds' positive rate (0.5 would rank it above most on this scale).
        prior = sum(bool(labels[i]) for i, g in enumerate(assignment) if g != f) / sum(g != f for g in assignment)
        for i in test:
            scores[i] = conversation_score(cal, conversations[i]) if conversations[i] else prior
        per_fold.append({"fold": f, **settings, "train": len(train), "test": len(test),
                         "no_evidence_score": prior, "weights": cal["weights"], "intercept": cal["intercept"]})
    return {"folds": assignment, "scores": scores, "fits": per_fold}


def auc_summary(scores, labels, groups, folds, *, draws: int, seed: int, level: float = 0.95) -> dict[str, Any]:
    """Pooled AUC, its group-clustered bootstrap interval, and each fold's AUC."""
    result = out_of_fold_auc(scores, labels, folds)
    interval = (list(group_bootstrap_auc_interval(scores, labels, groups, draws=draws, seed=seed, level=level))
                if draws > 0 else None)
    return {"auc": result["pooled"], "interval": interval, "per_fold": [p["auc"] for p in result["per_fold"]]}


# ------------------------------------------------------------------------------------------------------ the step


def _transcript_facts(transcripts: str | os.PathLike, group_key: str | None):
    """conversation id -> (number of messages, group value or None, line) from transcripts.jsonl."""
    src = transcripts_path(transcripts)
    shown = str(src)
    facts: dict[str, tuple[int, Any, int]] = {}
    key = group_key or DEFAULT_GROUP_KEY
    for line, conv in read_jsonl(src, display=shown):
        if not isinstance(conv, dict) or isinstance(conv.get("id"), bool) or not isinstance(conv.get("id"), (str, int)):
            raise InputError("expected a conversation with an id", path=shown, line=line, field="id")
        messages = conv.get("messages")
        metadata = conv.get("metadata") if isinstance(conv.get("metadata"), dict) else {}
        value = metadata.get(key)
        if isinstance(value, bool) or (value is not None and not isinstance(value, (str, int, float))):
            raise InputError("expected a string or a number to group by", path=shown, line=line,
                             field=f"metadata.{key}")
        facts[str(conv["id"])] = (len(messages) if isinstance(messages, list) else 0, value, line)
    return facts, shown


def _graded_config(identity: Mapping[str, Any], reward_config, policy, shown: str):
    """(reward name, its own config, the calibration it carried or None): the config the rows were graded with,
    for which the calibration is written. It must be the one given (--reward-config / --policy, else none)."""
    policy_config = {"policy": load_policy(policy)} if policy is not None else None
    name, config = resolve_reward(None, policy_config, reward_config)
    name = name or identity["name"]
    if name.removeprefix("reward:") != identity["name"]:
        raise InputError(f"the reward config is for {name} but the rows were graded by {identity['name']}",
                         path=str(reward_config), field="reward")
    own, previous = split_config(config)
    accepted = {digest(own)} | ({digest({**own, CALIBRATION_KEY: previous})} if previous else set())
    if identity["config_sha256"] not in accepted:
        given = "--reward-config/--policy" if reward_config or policy else "no config (the reward's defaults)"
        raise InputError(f"the rows were graded with config sha256 {identity['config_sha256'][:12]}, but {given} "
                         f"gives {digest(own)[:12]}: pass the config they were graded with", path=shown,
                         field="reward.config_sha256")
    return name, own, previous


def _groups(ids: Sequence[str], facts, group_key: str | None, facts_shown: str | None) -> list[str]:
    """Each conversation's fold group: its metadata[group_key], else its task_id, else itself."""
    groups = []
    for c in ids:
        value = facts.get(c, (0, None, 0))[1]
        if group_key is not None and value is None:
            where = {"path": facts_shown, "line": facts[c][2]} if c in facts else {"path": facts_shown}
            raise InputError(f"conversation {c!r} has no metadata.{group_key} to group by", **where,
                             field=f"metadata.{group_key}")
        groups.append(f"{group_key or DEFAULT_GROUP_KEY}={value}" if value is not None else f"conversation={c}")
    return groups


def _dump(document: Mapping[str, Any], output: Path) -> str:
    if output.suffix.lower() == ".json":
        import json

        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    import yaml

    return yaml.safe_dump(dict(document), sort_keys=False, default_flow_style=False, allow_unicode=True, width=100)


def run_calibrate(graded: str | os.PathLike, output: str | os.PathLike, *, labels: str | os.PathLike | None = None,
                  transcripts: str | os.PathLike | None = None, label_key: str | None = None,
                  group_key: str | None = None, reward_config: str | os.PathLike | None = None,
                  policy: str | os.PathLike | None = None, folds: int = DEFAULT_FOLDS, seed: int = 0,
                  draws: int = 2000) -> dict[str, Any]:
    """Fit, cross-validate, write the reward config file; returns the report (the file's `fitted` and more)."""
    if folds < 2:
        raise InputError(f"--folds must be at least 2, got {folds}", field="folds")
    if (labels is None) == (label_key is None) or (label_key is not None and transcripts is None):
        raise InputError("give labels either as --labels FILE or as --transcripts DIR --label-key KEY",
                         field="labels")
    if group_key is not None and transcripts is None:
        raise InputError("--group-key names a metadata key of the transcripts: give --transcripts DIR too",
                         field="group_key")
    if labels is not None:
        label_of = read_label_file(labels)
        label_source = {"from": "file", "sha256": sha256_file(labels)}
    else:
        label_of, _ = read_label_key(transcripts, label_key)
        label_source = {"from": f"transcripts metadata.{label_key}",
                        "sha256": sha256_file(transcripts_path(transcripts))}
    turns = read_graded_turns(graded, keep=set(label_of))
    identity = turns.identity
    shown = str(graded)
    name, own, previous = _graded_config(identity, reward_config, policy, shown)
    facts, facts_shown = _transcript_facts(transcripts, group_key) if transcripts is not None else ({}, None)

    ids = sorted(turns.breakdowns)  # labelled, with an applicable turn
    y = [label_of[c] if isinstance(label_of[c], bool) else label_of[c] > BINARISE_AT for c in ids]
    positives = sum(y)
    if positives < MIN_PER_CLASS or len(y) - positives < MIN_PER_CLASS:
        raise InputError(f"calibration needs at least {MIN_PER_CLASS} labelled conversations of each class (with an "
                         f"applicable turn); these have {positives} positive and {len(y) - positives} negative",
                         path=str(labels or transcripts), field="label")
    groups = _groups(ids, facts, group_key, facts_shown)
    grouping = (f"metadata.{group_key}" if group_key else
                f"metadata.{DEFAULT_GROUP_KEY} where present, else the conversation")
    if len(set(groups)) < folds:
        raise InputError(f"{folds} folds need at least {folds} groups; grouping by {grouping} gives "
                         f"{len(set(groups))}", field="folds")

    conversations = [turns.breakdowns[c] for c in ids]
    features = numeric_checks(conversations)
    if not features:
        raise InputError(f"reward {identity['name']}'s breakdown holds no numeric check (a number or a bool at "
                         "its top level) to weight", path=shown, field="breakdown")
    try:
        cv = cross_validate(conversations, y, groups, features, folds=folds, seed=seed)
        settings, how = choose_settings(conversations, y, groups, features, folds=folds, seed=seed)
        final = fit_calibration(conversations, y, features, **settings)
    except ValueError as exc:  # a training fold with one class, or every check constant in one
        raise InputError(f"cannot fit: {exc}", path=shown, field="breakdown") from None
    default_scores = [math.fsum(turns.scores[c]) / len(turns.scores[c]) for c in ids]
    length_measure = "messages" if facts else "messages through the last graded turn"
    lengths = [float(facts[c][0]) if c in facts else float(turns.last_turn[c] + 1) for c in ids]
    measured = {label: auc_summary(scores, y, groups, cv["folds"], draws=draws, seed=seed)
                for label, scores in (("calibrated", cv["scores"]), ("uncalibrated", default_scores),
                                      ("length", lengths))}

    fitted = {
        "stateset_agents": __version__,
        "labels": {**label_source, "positive_if": f"label is true, or a number > {BINARISE_AT}"},
        "graded": {"sha256": sha256_file(graded), "rows": turns.rows},
        "reward": identity,
        "replaces": previous is not None,
        "folds": folds, "group_key": grouping, "seed": seed,
        **settings, "chosen_by": how,
        "standardised_weights": final["standardised_weights"], "dropped_constant": final["dropped"],
        "out_of_fold": {
            "auc": _round(measured["calibrated"]["auc"]),
            "interval": [_round(v) for v in measured["calibrated"]["interval"] or ()] or None,
            "level": 0.95, "draws": draws, "interval_method": "percentile bootstrap resampling groups",
            "per_fold": [None if v is None else _round(v) for v in measured["calibrated"]["per_fold"]],
            "uncalibrated_auc": _round(measured["uncalibrated"]["auc"]),
            "uncalibrated_interval": [_round(v) for v in measured["uncalibrated"]["interval"] or ()] or None,
            "length_auc": _round(measured["length"]["auc"]), "length_measure": length_measure,
        },
        "counts": {"conversations": len(ids), "positives": positives, "negatives": len(ids) - positives,
                   "groups": len(set(groups)), "turns": sum(len(t) for t in conversations),
                   "labels": len(label_of), "unlabelled": len(turns.applicable - set(label_of)),
                   "no_applicable_turn": len(turns.last_turn) - len(turns.applicable)},
    }
    calibration = {k: final[k] for k in ("method", "features", "intercept", "weights", "fill")}
    calibration["fitted"] = fitted
    document = {"schema_version": REWARD_FILE_SCHEMA, "reward": name, "config": own, "calibration": calibration}
    out = Path(output)
    write_text(out, _dump(document, out))
    return {"output": str(out), "reward": identity, "calibration": calibration, "features": features,
            "measured": measured, "folds": cv["folds"], "fold_fits": cv["fits"], "length_measure": length_measure,
            "grouping": grouping, "notes": _notes(measured)}


def _notes(measured: Mapping[str, Any]) -> list[str]:
    """What a reader should take from the figures, said plainly."""
    calibrated, own = measured["calibrated"], measured["uncalibrated"]
    notes = []
    if calibrated["auc"] <= own["auc"]:
        notes.append(f"out of fold the fitted weights rank no better than the reward's own ({calibrated['auc']:.3f} "
                     f"vs {own['auc']:.3f}): keep the reward as it is, or calibrate on more labels")
    elif calibrated["interval"] and calibrated["interval"][0] <= own["auc"]:
        notes.append("the gain over the reward's own weights is within the interval: it may not hold on new logs")
    if calibrated["interval"] and calibrated["interval"][0] <= measured["length"]["auc"]:
        notes.append("the interval's lower bound does not clear the length-only baseline")
    return notes
