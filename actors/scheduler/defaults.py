"""The scheduler's defaults (a module of its own, so that the command line imports nothing heavy)."""

DEFAULT_CAPACITY = 4  # episodes in flight at once
DEFAULT_GROUP_SIZE = 1  # episodes per task in a row (group-relative advantages)
DEFAULT_MAX_STEPS = 8  # actions per episode, submit included
DEFAULT_RETEST_EVERY = 10  # every 10th group draws a retired (always / never solved) task; 0: never
