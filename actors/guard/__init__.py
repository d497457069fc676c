"""Guarding a long run: pinned versions, reward canaries, pause and quarantine (DESIGN.md, "Guarding a
long run"). `control` is the fold of the run's control log that every reader obeys."""
