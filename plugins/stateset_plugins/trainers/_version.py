VERSION = "0.1.0"
#: What every objective on the shared engine offers: a LoRA adapter, exact resume, eval_results.json, a run on this
#: machine (`train`), and `train --nproc N` handled ("multi_process": run on N ranks, or refused with the reason by
#: an objective that cannot, `distributed.check_supported`). Objectives add "remote" (train-remote may run them) or
#: "gpu" (needs one) at registration.
CAPABILITIES = ("lora", "checkpoint_resume", "eval_results", "local", "multi_process")
