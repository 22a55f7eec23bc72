VERSION = "0.1.0"
CAPABILITIES = ("lora", "checkpoint_resume", "eval_results")
