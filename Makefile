# The two set-up commands of README.md, and the developer targets behind
# them. Every target installs what it needs first (scripts/install-deps.sh
# is idempotent and quick when nothing is missing).

BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
PYTHON := /usr/bin/python3
NINJA_JOBS ?= 2

.PHONY: all deps build test unit e2e asan demo bench soak fuzz clean

all: build

deps:
	bash scripts/install-deps.sh

$(BUILD)/build.ninja:
	meson setup $(BUILD) --buildtype=debugoptimized

build: deps $(BUILD)/build.ninja
	ninja -C $(BUILD) -j $(NINJA_JOBS)

unit: build
	meson test -C $(BUILD) --suite unit --print-errorlogs

e2e: build
	KILN_BIN=$(abspath $(BUILD))/src/cmd/kiln $(PYTHON) -m pytest -q tests/e2e

test: unit e2e

$(ASAN_BUILD)/build.ninja:
	meson setup $(ASAN_BUILD) --buildtype=debug -Db_sanitize=address,undefined -Db_lundef=false

asan: deps $(ASAN_BUILD)/build.ninja
	ninja -C $(ASAN_BUILD) -j $(NINJA_JOBS)
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 meson test -C $(ASAN_BUILD) --suite unit --print-errorlogs
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 KILN_BIN=$(abspath $(ASAN_BUILD))/src/cmd/kiln $(PYTHON) -m pytest -q tests/e2e

demo: build
	bash scripts/demo.sh $(abspath $(BUILD))/src/cmd/kiln

bench: build
	$(PYTHON) bench/dispatch/run.py --kiln $(abspath $(BUILD))/src/cmd/kiln --out $(abspath $(BUILD))/bench-dispatch.json
	$(PYTHON) bench/dispatch/run.py --isolation --jobs 1000 --rounds 5 --kiln $(abspath $(BUILD))/src/cmd/kiln --out $(abspath $(BUILD))/bench-isolation.json
	$(PYTHON) bench/sim/run.py --kiln $(abspath $(BUILD))/src/cmd/kiln --out $(abspath $(BUILD))/bench-sim.json
	$(PYTHON) bench/ckpt/run.py --kiln $(abspath $(BUILD))/src/cmd/kiln --out $(abspath $(BUILD))/bench-ckpt.json
	$(PYTHON) bench/ckpt/step.py --kiln $(abspath $(BUILD))/src/cmd/kiln --out $(abspath $(BUILD))/bench-ckpt-step.json
	$(PYTHON) bench/coll/run.py --kiln $(abspath $(BUILD))/src/cmd/kiln --out $(abspath $(BUILD))/bench-coll.json
	$(PYTHON) bench/gateway/run.py --kiln $(abspath $(BUILD))/src/cmd/kiln --out $(abspath $(BUILD))/bench-gateway.json
	$(PYTHON) bench/verify/run.py --kiln $(abspath $(BUILD))/src/cmd/kiln --out $(abspath $(BUILD))/bench-verify.json

# Not in `make test`: 30 minutes of load with kill -9 and a disk that
# fills (bench/soak/run.py); SOAK_MINUTES=5 for a short one.
soak: build
	$(PYTHON) bench/soak/run.py --kiln $(abspath $(BUILD))/src/cmd/kiln --minutes $${SOAK_MINUTES:-30} --out $(abspath $(BUILD))/bench-soak.json

$(FUZZ_BUILD)/build.ninja:
	CC=clang meson setup $(FUZZ_BUILD) -Dfuzz=true -Dtests=disabled

fuzz: deps $(FUZZ_BUILD)/build.ninja
	ninja -C $(FUZZ_BUILD) -j $(NINJA_JOBS)
	bash scripts/fuzz.sh $(FUZZ_BUILD) $${FUZZ_SECONDS:-60}

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
