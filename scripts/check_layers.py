#!/usr/bin/env python3
"""Fails when an #include in src/ points up the layers of ARCHITECTURE.md or sideways between
siblings. A file may include its own folder and any folder of a lower layer.

Usage: python3 scripts/check_layers.py   (from the repository root; CI runs it as make layers-check)"""
import pathlib
import re
import sys

# Layer of each folder under src/ (ARCHITECTURE.md); a file belongs to its deepest listed folder.
LAYERS = {
    "base": 0,
    "model": 1, "tokenizer": 1,
    "harmony": 2, "step": 2,
    "engine": 3, "backend/cpu": 3, "backend/cuda": 3,
    "api": 4,
    "server": 5, "bench": 5,
    "cli": 6,
    "": 7,  # src/main.c
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def folder_of(rel):
    parts = pathlib.PurePosixPath(rel).parent.parts
    for n in range(len(parts), -1, -1):
        key = "/".join(parts[:n])
        if key in LAYERS:
            return key
    return None


def main():
    src = pathlib.Path("src")
    bad = 0
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".c", ".h", ".cu", ".cuh") or not path.is_file():
            continue
        here = folder_of(path.relative_to(src).as_posix())
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = (path.parent / m.group(1)).resolve()
            if not target.exists():
                target = (src / m.group(1)).resolve()
            if not target.exists():
                continue  # a system or generated header
            try:
                there = folder_of(target.relative_to(src.resolve()).as_posix())
            except ValueError:
                continue  # outside src/
            if here is None or there is None or here == there:
                continue
            if LAYERS[there] >= LAYERS[here]:
                print(f"{path}:{n}: includes {m.group(1)} (src/{there}, layer {LAYERS[there]}) "
                      f"from src/{here} (layer {LAYERS[here]})")
                bad += 1
    print(f"check_layers: {bad} include(s) point up or sideways" if bad
          else "check_layers: every include points down")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
