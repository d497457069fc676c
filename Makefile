# The two commands of the README. Both do every set-up step they need, idempotently.
.PHONY: demo test env up down status

demo:
	bash ops/demo.sh

test:
	bash ops/test.sh

env:
	bash ops/bootstrap.sh

up: env
	.venv/bin/trialog up

down: env
	.venv/bin/trialog down

status: env
	.venv/bin/trialog status
