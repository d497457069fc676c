"""Synthesis of bug-fix tasks from real projects: mutate one spot, keep it when the project's own tests
catch it (some fail, the rest still pass, the same on a rerun), and write it as a task folder."""
