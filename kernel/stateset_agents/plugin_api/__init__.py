"""The helper API for plugins: what a plugin may import from `stateset_agents` besides the core.

A plugin (first-party or a third party's) imports the core (`stateset_agents` itself and
`stateset_agents.core`: components, errors, jsonio, hookspec, registry, runtimes, contracts) and the modules of
this package, never the pipeline, `remote` or the faces: those are the application, free to change between
releases. What a trainer, evaluator, reward or provider needs from the application lives here instead, once, and
the application imports it from here too (`tests/kernel/test_plugin_imports.py` fails when a plugin imports
anything else of the kernel):

* `text`: the visible text of a message (one rule for improve, the rewards, training and evaluation);
* `datasets`: reading curated training rows and evaluation prompts as every trainer does (split roles refused,
  JSON-text columns decoded), and the split roles themselves (`splits`);
* `overlap`: refusing (or dropping) training rows whose prompt is a held-out case;
* `stats`: the statistics module (paired comparison, bootstrap intervals, sign-flip p-value, AUC, folds), and
  `evidence`: the evidence block of eval_results.json built with it;
* `lineage`: sealing a JSON record with its own digest, and the base model a manifest names;
* `jobs`: the contract between a provider and the job it runs (the worker's command and environment, the run-plan
  bundle, the state directory, GPU names, safe artifact paths), and `chat_host`: an adapter answering chat turns on
  a provider's machine.

Importing this package imports none of its modules; each is light (no torch, no SDK).
"""
