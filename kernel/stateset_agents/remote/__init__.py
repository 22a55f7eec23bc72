"""Remote training under a hard cost cap: the provider-independent half.

`config` (the schema `finetune` and `train-remote` share), `plan` (workspace, run id, checksum), `state` (state dir,
locks, ledger, run records), `cap` (the quote check and the watchdog), `gpus` (GPU name resolution), `artifacts`
(checksummed collection), `worker` (what runs next to the trainer, on any provider), `session` (the flows the CLI
drives). Providers plug in through `stateset_agents.Provider`; nothing here imports a provider SDK.
"""
