VERSION = "0.1.0"
#: What every objective on the shared engine offers: a LoRA adapter, exact resume, eval_results.json, and a run on
#: this machine (`train`). Objectives add "remote" (train-remote may run them) or "gpu" (needs one) at registration.
CAPABILITIES = ("lora", "checkpoint_resume", "eval_results", "local")
