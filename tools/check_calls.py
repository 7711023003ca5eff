#!/usr/bin/env python3
"""check_calls.py: the file-level call graph inside a folder, checked against an order.

`make calls` runs it (and `make layers` runs that). For each [folder] section of
tools/calls.txt it reads `nm` of the folder's objects (build/obj/<folder>/**/*.o): the
global functions each file defines (T) and the symbols it leaves undefined (U). A file
calls another when it uses a function the other defines. It fails (exit 1, one line per
problem on stderr) when
  - a file calls one it may not call: tools/calls.txt lists, for each file, the files it
    calls, closed transitively (tick.c calls end_tick.c, which calls clock.c: tick.c may
    call clock.c too); anything else runs back up or across;
  - the files call each other in a cycle;
  - an object has no line in tools/calls.txt, or a line names a file that has no object,
    or the list itself has a cycle.
On success it prints the graph, one line per file in the listed order (leaves first): the
files each one actually calls.

Usage: tools/check_calls.py [--objs DIR] [--rules FILE] [--nm FILE] [OBJECT...]
  OBJECT...    the objects to read (the Makefile names its lists, so a stale object of a
               removed file is not read); default: every .o under DIR/<folder>/
  --objs DIR   where the objects are (default build/obj)
  --rules FILE the order (default tools/calls.txt)
  --nm FILE    read `nm -A` output of the objects from FILE ('-': stdin) instead of
               running nm (paths in it are taken relative to --objs); the tests use it
"""
import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_layers import closure, find_cycle  # noqa: E402  (one graph walk for both checks)


def read_rules(path):
    """{folder: {file: [files it calls]}} in file order; files relative to the folder."""
    sections = {}
    current = None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if line.startswith("[") and line.endswith("]"):
                current = sections.setdefault(line[1:-1].strip().rstrip("/"), {})
                continue
            if current is None or ":" not in line:
                sys.exit(f"{path}:{number}: expected '[folder]' or 'file.c: files it calls', got {line!r}")
            name, calls = line.split(":", 1)
            name = name.strip()
            if name in current:
                sys.exit(f"{path}:{number}: {name} is listed twice")
            current[name] = calls.split()
    for folder, rules in sections.items():
        for name, calls in rules.items():
            for callee in calls:
                if callee not in rules:
                    sys.exit(f"{path}: [{folder}] {name} calls {callee}, which is not listed")
    return sections


def parse_nm(text, objs):
    """{object path relative to objs: (defined functions, undefined symbols)} from `nm -A`
    output (`path.o: value type name`, or `path.o: U name`)."""
    symbols = {}
    for line in text.splitlines():
        if ":" not in line:
            continue
        path, rest = line.split(":", 1)
        path = os.path.relpath(os.path.abspath(path), os.path.abspath(objs))
        defined, undefined = symbols.setdefault(path, (set(), set()))
        parts = rest.split()
        if len(parts) == 3 and parts[1] in ("T", "W"):
            defined.add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
    return symbols


def run_nm(objs, folders, objects):
    found = list(objects)
    for folder in [] if objects else folders:
        for dirpath, _, names in os.walk(os.path.join(objs, folder)):
            found += [os.path.join(dirpath, n) for n in names if n.endswith(".o")]
    if not found:
        sys.exit(f"check_calls: no objects under {objs}: build them first (make calls)")
    r = subprocess.run(["nm", "-A", *sorted(found)], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"check_calls: nm failed: {r.stderr.strip()}")
    return r.stdout


def call_graph(symbols, folder):
    """{file: {callee file: sorted functions}} between the folder's files (relative names,
    .c for .o)."""
    prefix = folder + "/"
    files = {p[len(prefix):-2] + ".c": s for p, s in symbols.items() if p.startswith(prefix) and p.endswith(".o")}
    owner = {}
    for name, (defined, _) in files.items():
        for fn in defined:
            owner[fn] = name
    graph = {name: {} for name in files}
    for name, (_, undefined) in files.items():
        for fn in undefined:
            callee = owner.get(fn)
            if callee and callee != name:
                graph[name].setdefault(callee, []).append(fn)
    for callees in graph.values():
        for fns in callees.values():
            fns.sort()
    return graph


def check_folder(folder, rules, graph, rules_path):
    problems = []
    cycle = find_cycle(rules)
    if cycle:
        problems.append(f"{rules_path}: [{folder}] the list has a cycle: {' -> '.join(cycle)}")
        return problems
    allowed = closure(rules)
    for name in sorted(graph):
        if name not in rules:
            problems.append(f"{folder}/{name}: not listed in {rules_path} [{folder}]")
    for name in rules:
        if name not in graph:
            problems.append(f"{rules_path}: [{folder}] {name} is listed but has no object")
    for name in sorted(graph):
        if name not in rules:
            continue
        for callee, fns in sorted(graph[name].items()):
            if callee in rules and callee not in allowed[name]:
                problems.append(f"{folder}/{name}: calls {', '.join(fns)} ({folder}/{callee}), but {name} does not "
                                f"call down to {callee}: the call runs back up or across")
    actual = {n: set(c) for n, c in graph.items()}
    cycle = find_cycle(actual)
    if cycle:
        problems.append(f"call cycle between files of {folder}/: {' -> '.join(cycle)}")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--objs", default=os.path.join(ROOT, "build", "obj"))
    ap.add_argument("--rules", default=os.path.join(ROOT, "tools", "calls.txt"))
    ap.add_argument("--nm")
    ap.add_argument("objects", nargs="*")
    args = ap.parse_args()
    sections = read_rules(args.rules)
    rules_name = os.path.relpath(args.rules, ROOT) if args.rules.startswith(ROOT) else args.rules
    if args.nm:
        text = sys.stdin.read() if args.nm == "-" else open(args.nm, encoding="utf-8").read()
    else:
        text = run_nm(args.objs, sections, args.objects)
    symbols = parse_nm(text, args.objs)
    problems, report = [], []
    for folder, rules in sections.items():
        graph = call_graph(symbols, folder)
        problems += check_folder(folder, rules, graph, rules_name)
        n_calls = sum(len(c) for c in graph.values())
        for name in rules:
            if name in graph:
                report.append(f"{folder}/{name} -> {' '.join(sorted(graph[name]))}".rstrip())
        report.append(f"{folder}/: {len(graph)} files, {n_calls} calls between files")
    if problems:
        for p in problems:
            print(p, file=sys.stderr)
        return 1
    print("\n".join(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
