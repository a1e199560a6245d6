# Thin wrapper over the scripts; the scripts are the source of truth.
.PHONY: deps build models run test bench lint clean
deps:
	scripts/install-deps.sh
build: deps
	scripts/build.sh
models: deps
	.venv/bin/python examples/generate_models.py
run:
	scripts/serve.sh
test:
	scripts/test.sh
bench: build
	bench/run_cpu_bench.sh
lint:
	scripts/lint.sh
clean:
	rm -rf build
