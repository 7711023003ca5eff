#!/usr/bin/env python3
"""check_layers.py: the folder-level include graph of the tree, checked against the layers.

`make layers` runs it (and `make test` runs that). It reads every #include "..." in the
.c, .h, .cu and .cuh files under the root, maps each file to its top-level folder, and fails
(exit 1, one line per problem) when
  - an include goes from a folder to one it does not use (tools/layers.txt, closed
    transitively: cli uses server, so it also uses everything server uses);
  - the folders include each other in a cycle;
  - a header named *_internal.h or *.cuh is included from outside its own folder (tests/
    may include any header: they test internals);
  - a folder with sources is not listed in tools/layers.txt, or the list itself has a cycle.
On success it prints the graph, one line per folder in layer order: the folders each one
actually includes.

Usage: tools/check_layers.py [ROOT] [--layers FILE]
"""
import argparse
import os
import re
import sys

SOURCE_EXTENSIONS = (".c", ".h", ".cu", ".cuh")
SKIPPED_DIRS = {"build", "models", "__pycache__"}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def read_layers(path):
    """{folder: [folders it uses]} in file order."""
    layers = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if ":" not in line:
                sys.exit(f"{path}:{number}: expected 'folder: folders it uses', got {line!r}")
            folder, uses = line.split(":", 1)
            layers[folder.strip()] = uses.split()
    for folder, uses in layers.items():
        for used in uses:
            if used not in layers:
                sys.exit(f"{path}: {folder} uses {used}, which is not listed")
    return layers


def find_cycle(graph):
    """One cycle of the directed graph {node: iterable of nodes} as a list, or None."""
    state = {}  # node -> 1 on the current path, 2 done
    path = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def closure(layers):
    """{folder: every folder it may include, itself included}."""
    allowed = {}

    def reach(folder):
        if folder not in allowed:
            allowed[folder] = {folder}
            for used in layers[folder]:
                allowed[folder] |= reach(used)
        return allowed[folder]

    for folder in layers:
        reach(folder)
    return allowed


def source_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if name.endswith(SOURCE_EXTENSIONS):
                yield os.path.relpath(os.path.join(dirpath, name), root)


def resolve(root, includer, target):
    """The included file's path relative to root, or None for a header outside the tree."""
    for candidate in (target, os.path.normpath(os.path.join(os.path.dirname(includer), target))):
        if os.path.isfile(os.path.join(root, candidate)):
            return candidate
    return None


def is_internal(header):
    name = os.path.basename(header)
    return name.endswith("_internal.h") or name.endswith(".cuh")


def check(root, layers_path):
    """(problems, graph): problems as lines; graph {folder: set of folders it includes}."""
    layers = read_layers(layers_path)
    problems = []
    cycle = find_cycle(layers)
    if cycle:
        return [f"{layers_path}: the layers themselves form a cycle: {' -> '.join(cycle)}"], {}
    allowed = closure(layers)
    graph = {}
    unlisted = set()
    for path in source_files(root):
        folder = path.split(os.sep, 1)[0]
        if os.sep not in path:
            problems.append(f"{path}: a source file at the top level belongs in a folder")
            continue
        if folder not in layers:
            unlisted.add(folder)
            continue
        graph.setdefault(folder, set())
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for target in INCLUDE_RE.findall(text):
            header = resolve(root, path, target)
            if header is None:
                continue
            to = header.split(os.sep, 1)[0]
            if to != folder:
                graph[folder].add(to)
            if to not in allowed.get(folder, set()) and to in layers:
                problems.append(f"{path}: includes {header}, but {folder}/ does not use {to}/ (tools/layers.txt)")
            if is_internal(header) and folder != "tests" and \
                    not path.startswith(os.path.dirname(header) + os.sep):
                problems.append(f"{path}: includes {header}, an internal header of {os.path.dirname(header)}/")
    for folder in sorted(unlisted):
        problems.append(f"{folder}/: has sources but is not in {layers_path}: add it with the folders it uses")
    cycle = find_cycle(graph)
    if cycle:
        problems.append(f"include cycle between folders: {' -> '.join(cycle)}")
    return problems, graph


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=".")
    parser.add_argument("--layers", default=None, help="the layer list (default ROOT/tools/layers.txt)")
    args = parser.parse_args()
    layers_path = args.layers or os.path.join(args.root, "tools", "layers.txt")
    problems, graph = check(args.root, layers_path)
    if problems:
        for line in problems:
            print(f"layers: {line}", file=sys.stderr)
        print(f"layers: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    order = [folder for folder in read_layers(layers_path) if folder in graph]
    width = max(len(folder) for folder in order)
    for folder in order:
        used = [f for f in order if f in graph[folder]]
        print(f"{folder + '/':<{width + 1}} -> {' '.join(u + '/' for u in used) or '(nothing)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
