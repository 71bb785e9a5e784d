# Thin wrapper over CMake: `make` builds build/gptoss, `make test` runs the CPU tests (what CI runs),
# `make asan` builds and runs the tests under AddressSanitizer + UBSan in build-asan/.
JOBS ?= $(shell nproc)

all: build/gptoss

build/Makefile:
	cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo

build/gptoss: build/Makefile FORCE
	cmake --build build -j $(JOBS)

test: build/gptoss
	cd build && ctest --output-on-failure -LE gpu -j $(JOBS)

asan:
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DGPTOSS_SANITIZE=ON -DGPTOSS_CUDA=OFF
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -LE 'gpu|slow' -j $(JOBS)

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu' '*.cuh')

# Fails (and names the include) when an include in src/ points up the layers of ARCHITECTURE.md.
layers-check:
	python3 scripts/check_layers.py

# Fails (and names the files) when a source file is not formatted; CI runs it.
format-check:
	clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h' '*.cu' '*.cuh')

clean:
	rm -rf build build-asan

.PHONY: all test asan format format-check layers-check clean FORCE
FORCE:
