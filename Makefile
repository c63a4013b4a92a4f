# The two commands a new machine needs: `make run` and `make test`. Both install what they need.
.PHONY: run test lint bench-design clean

run:
	bash scripts/run.sh

test:
	bash scripts/test.sh $(PYTEST_ARGS)

lint:
	bash scripts/install.sh requirements-dev.txt && .venv/bin/ruff check .

bench-design:
	bash scripts/install.sh requirements-dev.txt && bash scripts/services.sh && .venv/bin/python bench/design.py

clean:
	rm -rf var .pytest_cache
