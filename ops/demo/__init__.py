"""`trialog demo`: the main job, a short training run on the local stack with a held-out evaluation."""
