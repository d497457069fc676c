"""The learner's defaults (a module of its own, so that the command line shows them without importing
torch, as `actors.scheduler.defaults` does for the scheduler)."""

DEFAULT_TARGETS = ("q_proj", "v_proj")  # the attention projections LoRA adapts
DEFAULT_RANK = 8  # LoRA rank (0: train every parameter)
PROMPT_ENCODERS = ("chat", "bytes")  # how a turn's prompt is rebuilt from a trajectory
IDLE_CHECKPOINT_S = 10.0  # when caught up, checkpoint progress without a step at most this often
STATS_FILE = "stats.jsonl"  # one line per training step, in the checkpoint folder (what the report charts)
CHECKPOINT_FILE = "learner.ckpt"  # the learner's one checkpoint file, in its checkpoint folder
