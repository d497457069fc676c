"""Synthesis of tasks from real projects: a small, plausible bug put into a project's library code, kept
as a task when the project's own tests catch it.

- `mutate`: the candidate bugs of a module (`mutations`), applying one (`Mutation.apply`), and the order
  in which to try them (`sample`)
- `instruction`: the task's instruction, written from the failing tests only (`write_instruction`,
  `error_excerpt`, `leaks`)
"""
