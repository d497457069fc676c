"""Tasks and rewards: the task format, task sets, and the pure parts of grading.

- `spec`: the task folder format, `load_task` / `load_tasks` / `find_tasks`, `TaskError`, `task_version`
- `globs`, `patch`, `testids`: protected-path globs, unified diffs, frozen test ids (used by `spec`)
- `reward`: the reward rule and the verdict (`grade`)
- `tamper`: comparing the protected paths of repo/ and a workspace
- `workspace`: copying an untrusted workspace without following links out of it
- `report`, `harness/`: the grading harness's pytest plugin and the reader of its report
- `hostrun`: running frozen tests with the host Python (trusted code only: authoring and CI)
- `humaneval`, `decontaminate`, `cli`: the `trialog tasks` commands
- `synth/`: bug-fix tasks synthesized from real projects (candidate bugs, instructions)
"""
