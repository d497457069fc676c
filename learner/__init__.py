"""The torch learner: near-on-policy consumption, policy update, weight publishing."""
