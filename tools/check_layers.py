#!/usr/bin/env python3
"""check_layers.py: the folder-level include graph of the tree, checked against the layers.

`make layers` runs it (and `make test` runs that). It reads every #include "..." in the
.c, .h, .cu and .cuh files under the root, maps each file to its layer (the deepest folder
listed in tools/layers.txt that holds it: a sub-folder such as server/api is a layer of its
own when it is listed, else the file belongs to its top-level folder), and fails (exit 1,
one line per problem) when
  - an include goes from a folder to one it does not use (tools/layers.txt, closed
    transitively: cli uses server/http, so it also uses everything server/http uses);
  - the folders include each other in a cycle;
  - a folder marked `!other` in the list reaches a header of other/ through any chain of
    includes (server/api and server/http must never see the device API, not even
    through sched.h);
  - a header named *_internal.h or *.cuh is included from outside its own folder, or a
    header of an unlisted sub-folder (gpu/host/, gpu/cuda/) from outside its layer
    (tests/ may include any header: they test internals);
  - a folder with sources is not listed in tools/layers.txt, or the list itself has a cycle.
On success it prints the graph, one line per folder in layer order: the folders each one
actually includes.

With --objects DIR (the build's object tree, build/obj) it also checks the link level:
every object under DIR/<layer>/ whose undefined symbols are defined by an object of a
layer it does not use is a problem (`nm`; a call that runs back up without an include).
--only LAYER (repeatable) limits that check to objects of those layers.

Usage: tools/check_layers.py [ROOT] [--layers FILE] [--objects DIR [--only LAYER]...]
"""
import argparse
import os
import re
import subprocess
import sys

SOURCE_EXTENSIONS = (".c", ".h", ".cu", ".cuh")
SKIPPED_DIRS = {"build", "models", "__pycache__"}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def read_layers(path, forbidden=None):
    """{folder: [folders it uses]} in file order; forbidden, when given, gets
    {folder: [folders it must never reach]} from the `!folder` entries."""
    layers = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if ":" not in line:
                sys.exit(f"{path}:{number}: expected 'folder: folders it uses', got {line!r}")
            folder, uses = line.split(":", 1)
            layers[folder.strip()] = [u for u in uses.split() if not u.startswith("!")]
            if forbidden is not None:
                forbidden[folder.strip()] = [u[1:] for u in uses.split() if u.startswith("!")]
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


def layer_of(path, layers):
    """The layer a file belongs to: the deepest folder holding it that layers lists
    (server/api for server/api/chat.c when server/api is listed), else its top folder."""
    parts = path.split(os.sep)[:-1]
    for depth in range(len(parts), 0, -1):
        folder = "/".join(parts[:depth])
        if folder in layers:
            return folder
    return parts[0] if parts else ""


def within(layer, folder):
    """Whether layer is folder or one of its sub-folders (server/api within server)."""
    return layer == folder or layer.startswith(folder + "/")


def private_to(header, layers):
    """The folder a header is private to (its own for *_internal.h and .cuh, its layer for
    any header of a sub-folder that is not a layer itself), or None for a public header."""
    name = os.path.basename(header)
    if name.endswith("_internal.h") or name.endswith(".cuh"):
        return os.path.dirname(header)
    layer = layer_of(header, layers)
    return layer if os.path.dirname(header).replace(os.sep, "/") != layer else None


def reach(includes, start):
    """Every file reachable from start through includes ({file: [files]}), with the
    chain that first reached it: {file: [start, ..., file]}."""
    chains = {start: [start]}
    pending = [start]
    while pending:
        current = pending.pop()
        for nxt in includes.get(current, ()):
            if nxt not in chains:
                chains[nxt] = chains[current] + [nxt]
                pending.append(nxt)
    return chains


def check(root, layers_path):
    """(problems, graph): problems as lines; graph {folder: set of folders it includes}."""
    forbidden = {}
    layers = read_layers(layers_path, forbidden)
    problems = []
    cycle = find_cycle(layers)
    if cycle:
        return [f"{layers_path}: the layers themselves form a cycle: {' -> '.join(cycle)}"], {}
    allowed = closure(layers)
    graph = {}
    includes = {}  # file -> the project files it includes
    unlisted = set()
    for path in source_files(root):
        folder = layer_of(path, layers)
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
            includes.setdefault(path, []).append(header)
            to = layer_of(header, layers)
            if to != folder:
                graph[folder].add(to)
            if to not in allowed.get(folder, set()) and to in layers:
                problems.append(f"{path}: includes {header}, but {folder}/ does not use {to}/ (tools/layers.txt)")
            owner = private_to(header, layers)
            if owner and folder != "tests" and not path.startswith(owner + os.sep):
                problems.append(f"{path}: includes {header}, an internal header of {owner}/")
    for path in sorted(includes):
        folder = layer_of(path, layers)
        never = forbidden.get(folder, [])
        if not never:
            continue
        seen = [(len(chain), reached, chain, other) for reached, chain in reach(includes, path).items()
                for other in never if within(layer_of(reached, layers), other)]
        if seen:  # the shortest chain says best where the forbidden header comes in
            _, reached, chain, other = min(seen)
            problems.append(f"{path}: reaches {reached} ({' -> '.join(chain)}), but {folder}/ must never "
                            f"see {other}/ (tools/layers.txt)")
    for folder in sorted(unlisted):
        problems.append(f"{folder}/: has sources but is not in {layers_path}: add it with the folders it uses")
    cycle = find_cycle(graph)
    if cycle:
        problems.append(f"include cycle between folders: {' -> '.join(cycle)}")
    return problems, graph


def object_symbols(path):
    """(defined, undefined) global symbol names of one object file (nm)."""
    out = subprocess.run(["nm", "-g", path], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0] in ("U", "w", "v"):
            undefined.add(fields[1])
        elif len(fields) == 3 and fields[1] not in ("U", "w", "v"):
            defined.add(fields[2])
    return defined, undefined


# Layers whose objects are not the product's: a symbol is owned by the product file that
# defines it, never by a test, benchmark or tool object that includes that file.
OUTSIDE_THE_PRODUCT = ("tests", "bench", "tools")


def check_objects(objects, layers_path, only=()):
    """Link-level problems: an object (under objects/<its source path>.o) that uses a
    symbol defined by an object of a layer its layer does not use."""
    layers = read_layers(layers_path)
    allowed = closure(layers)
    found = []  # (object path relative to objects, layer, defined, undefined)
    for dirpath, dirnames, filenames in os.walk(objects):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(".o"):
                rel = os.path.relpath(os.path.join(dirpath, name), objects)
                layer = layer_of(rel, layers)
                if layer in layers:
                    found.append((rel, layer) + object_symbols(os.path.join(dirpath, name)))
    definer = {}
    for rel, layer, defined, _ in found:
        if layer in OUTSIDE_THE_PRODUCT:
            continue  # a test that includes a .c defines the product's symbols again
        for symbol in defined:
            definer.setdefault(symbol, (rel, layer))
    problems = []
    for rel, layer, _, undefined in found:
        if only and not any(within(layer, o) for o in only):
            continue
        for symbol in sorted(undefined):
            if symbol in definer and definer[symbol][1] not in allowed[layer]:
                other, to = definer[symbol]
                problems.append(f"{rel}: uses {symbol}, defined in {other}, but {layer}/ does not use {to}/ "
                                f"(tools/layers.txt)")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=".")
    parser.add_argument("--layers", default=None, help="the layer list (default ROOT/tools/layers.txt)")
    parser.add_argument("--objects", default=None, help="also check the symbols of the objects under this folder")
    parser.add_argument("--only", action="append", default=[], help="with --objects: only these layers' objects")
    args = parser.parse_args()
    layers_path = args.layers or os.path.join(args.root, "tools", "layers.txt")
    problems, graph = check(args.root, layers_path)
    if args.objects:
        problems += check_objects(args.objects, layers_path, args.only)
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
