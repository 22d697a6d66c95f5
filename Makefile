# The two set-up commands of README.md, and the developer targets behind
# them. Every target installs the Debian packages it needs first
# (scripts/install-deps.sh PURPOSE is idempotent and quick when nothing is
# missing): `make build` only what compiles kiln.

BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
DEB_OUT ?= build-deb
PYTHON := /usr/bin/python3
NINJA_JOBS ?= 2
# E2E_WORKERS=2 runs the end-to-end tests on two pytest-xdist workers, a
# test module at a time on each; 1 (the default) runs them one by one.
E2E_WORKERS ?= 1
E2E_PYTEST = $(PYTHON) -m pytest -q $(if $(filter-out 1,$(E2E_WORKERS)),-n $(E2E_WORKERS) --dist loadgroup)
# make install PREFIX=/opt/kiln DESTDIR=/tmp/stage
PREFIX ?= /usr/local
DESTDIR ?=

.PHONY: all deps test-deps demo-deps bench-deps deb-deps fuzz-deps build \
	test unit e2e asan demo bench soak fuzz install deb clean openapi

all: build

deps:
	bash scripts/install-deps.sh build
test-deps:
	bash scripts/install-deps.sh test
demo-deps:
	bash scripts/install-deps.sh demo
bench-deps:
	bash scripts/install-deps.sh bench
deb-deps:
	bash scripts/install-deps.sh deb
fuzz-deps:
	bash scripts/install-deps.sh fuzz

$(BUILD)/build.ninja:
	meson setup $(BUILD) --buildtype=debugoptimized

build: deps $(BUILD)/build.ninja
	ninja -C $(BUILD) -j $(NINJA_JOBS)

# The API's OpenAPI document, as the built server describes it.
openapi: build
	$(BUILD)/src/cmd/kiln openapi > docs/openapi.json

unit: build
	meson test -C $(BUILD) --suite unit --print-errorlogs

e2e: test-deps build
	KILN_BIN=$(abspath $(BUILD))/src/cmd/kiln $(E2E_PYTEST) tests/e2e

test: test-deps unit e2e

# The binary finds its data beside itself (PREFIX/share/kiln), so the
# prefix the build was set up with matters only for the units' paths.
install: build
	meson configure $(BUILD) -Dprefix=$(abspath $(PREFIX))
	meson install -C $(BUILD) $(if $(DESTDIR),--destdir $(abspath $(DESTDIR)))

deb: deb-deps
	bash scripts/deb.sh $(abspath $(DEB_OUT))

$(ASAN_BUILD)/build.ninja:
	meson setup $(ASAN_BUILD) --buildtype=debug -Db_sanitize=address,undefined -Db_lundef=false

asan: test-deps $(ASAN_BUILD)/build.ninja
	ninja -C $(ASAN_BUILD) -j $(NINJA_JOBS)
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 meson test -C $(ASAN_BUILD) --suite unit --print-errorlogs
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 KILN_BIN=$(abspath $(ASAN_BUILD))/src/cmd/kiln $(E2E_PYTEST) tests/e2e

demo: demo-deps build
	bash scripts/demo.sh $(abspath $(BUILD))/src/cmd/kiln

bench: bench-deps build
	$(PYTHON) bench/dispatch/run.py --kiln $(abspath $(BUILD))/src/cmd/kiln --out $(abspath $(BUILD))/bench-dispatch.json
	$(PYTHON) bench/dispatch/run.py --isolation --jobs 1000 --rounds 5 --kiln $(abspath $(BUILD))/src/cmd/kiln --out $(abspath $(BUILD))/bench-isolation.json
	$(PYTHON) bench/sim/run.py --kiln $(abspath $(BUILD))/src/cmd/kiln --out $(abspath $(BUILD))/bench-sim.json
	$(PYTHON) bench/ckpt/run.py --kiln $(abspath $(BUILD))/src/cmd/kiln --out $(abspath $(BUILD))/bench-ckpt.json
	$(PYTHON) bench/ckpt/step.py --kiln $(abspath $(BUILD))/src/cmd/kiln --out $(abspath $(BUILD))/bench-ckpt-step.json
	$(PYTHON) bench/coll/run.py --kiln $(abspath $(BUILD))/src/cmd/kiln --out $(abspath $(BUILD))/bench-coll.json
	$(PYTHON) bench/gateway/run.py --kiln $(abspath $(BUILD))/src/cmd/kiln --out $(abspath $(BUILD))/bench-gateway.json
	$(PYTHON) bench/verify/run.py --kiln $(abspath $(BUILD))/src/cmd/kiln --out $(abspath $(BUILD))/bench-verify.json
	$(PYTHON) bench/transfer/run.py --azurite --kiln $(abspath $(BUILD))/src/cmd/kiln --out $(abspath $(BUILD))/bench-transfer.json

# Not in `make test`: 30 minutes of load with kill -9 and a disk that
# fills (bench/soak/run.py); SOAK_MINUTES=5 for a short one.
soak: build
	$(PYTHON) bench/soak/run.py --kiln $(abspath $(BUILD))/src/cmd/kiln --minutes $${SOAK_MINUTES:-30} --out $(abspath $(BUILD))/bench-soak.json

$(FUZZ_BUILD)/build.ninja:
	CC=clang meson setup $(FUZZ_BUILD) -Dfuzz=true -Dtests=disabled

fuzz: fuzz-deps $(FUZZ_BUILD)/build.ninja
	ninja -C $(FUZZ_BUILD) -j $(NINJA_JOBS)
	bash scripts/fuzz.sh $(FUZZ_BUILD) $${FUZZ_SECONDS:-60}

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD) $(DEB_OUT)
