#!/usr/bin/env python3
"""The C ABI of libpipeforge.so as one sorted line per promise, and the check that keeps it.

    abi_dump.py dump  HEADER LIBRARY              # print the ABI of a built library
    abi_dump.py check HEADER LIBRARY ABI_FILE     # exit 1 if a promise in ABI_FILE is broken
    abi_dump.py update HEADER LIBRARY ABI_FILE    # append new entries (refuses if one is broken)

Lines (ABI_FILE is c_api/abi/v<abi>.txt, checked in):
    soname libpipeforge.so.1
    symbol pf_trainer_step@@PIPEFORGE_1                      exported, with its version node
    function pf_status* pf_trainer_step(pf_trainer* trainer, ...)   declared in the header
    field pf_trainer_options.lr float offset 40 size 4       layout, measured by a compiled program
    enum pf_code.PF_TIMEOUT = 12
The rule (the one ONNX Runtime keeps for its version-1 function table): entries may be added,
never removed or changed. Structs grow only at their end (callers say which version they pass in
struct_size), so a struct's total size is not frozen, but the type, offset and size of every field
it ever had are.
"""
import os
import re
import subprocess
import sys
import tempfile


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def squash(text):
    """One spelling of a declaration: single spaces, `T* name`, `f(a, b)`."""
    text = re.sub(r"\s+", " ", text).strip()
    text = re.sub(r"\s*([(),*\[\]])\s*", r"\1", text).replace(",", ", ")
    return re.sub(r"\*(?=\w)", "* ", text)


TYPE_WORDS = {"void", "const", "struct", "unsigned", "signed", "char", "int", "long", "short", "float", "double"}


def without_parameter_names(declaration):
    """`f(const T* x, int n)` -> `f(const T*, int)`: a parameter's name is not part of the ABI."""
    depth, open_paren = 0, len(declaration) - 1  # the parameter list is the last (...) group
    while True:
        depth += {")": 1, "(": -1}.get(declaration[open_paren], 0)
        if depth == 0:
            break
        open_paren -= 1
    head, params = declaration[:open_paren], declaration[open_paren + 1:-1]
    kept = []
    for param in split_top_level(params, ","):
        m = re.match(r"^(.*[\s*])(\w+)$", param)
        kept.append(m.group(1).strip() if m and m.group(2) not in TYPE_WORDS and m.group(1).strip() not in ("const", "struct") else param)
    return head + "(" + ", ".join(kept) + ")"


def split_top_level(text, separator):
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == separator and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def parse_header(path):
    text = strip_comments(open(path).read())
    functions = [without_parameter_names(squash(m.group(1))) for m in re.finditer(r"PF_API\s+([^;{}]*\))\s*;", text)]
    structs = {}
    for m in re.finditer(r"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;", text, flags=re.S):
        fields = []
        for declaration in split_top_level(m.group(2), ";"):
            pointer = re.search(r"\(\s*\*\s*(\w+)\s*\)", declaration)
            if pointer:  # a function pointer: its whole declaration is its type
                fields.append((pointer.group(1), without_parameter_names(squash(declaration))))
                continue
            base, *more = split_top_level(declaration, ",")
            name = re.search(r"(\w+)\s*(\[[^\]]*\])?\s*$", base)
            type_text = squash(base[: name.start()])
            fields.append((name.group(1), squash(type_text + (name.group(2) or ""))))
            for extra in more:
                extra_name = re.search(r"\**\s*(\w+)", extra).group(1)
                fields.append((extra_name, type_text))
        structs[m.group(3)] = fields
    enums = {}
    for m in re.finditer(r"typedef\s+enum\s+\w*\s*\{(.*?)\}\s*(\w+)\s*;", text, flags=re.S):
        enums[m.group(2)] = [item.split("=")[0].strip() for item in split_top_level(m.group(1), ",")]
    return functions, structs, enums


def measured_layout(header, structs, enums):
    """Offsets, sizes and enum values as the C compiler lays them out, from a generated program."""
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "%s"' % os.path.abspath(header),
             "int main(void) {"]
    for struct, fields in sorted(structs.items()):
        for field, type_text in fields:
            lines.append('  printf("field %s.%s %s offset %%zu size %%zu\\n", offsetof(%s, %s), sizeof(((%s*)0)->%s));'
                         % (struct, field, type_text.replace("%", "%%").replace('"', '\\"'), struct, field, struct, field))
    for enum, names in sorted(enums.items()):
        for name in names:
            lines.append('  printf("enum %s.%s = %%lld\\n", (long long)%s);' % (enum, name, name))
    lines += ["  return 0;", "}"]
    with tempfile.TemporaryDirectory() as work:
        source, program = os.path.join(work, "layout.c"), os.path.join(work, "layout")
        open(source, "w").write("\n".join(lines) + "\n")
        subprocess.run([os.environ.get("CC", "gcc"), "-std=c99", "-o", program, source], check=True)
        return subprocess.run([program], check=True, capture_output=True, text=True).stdout.splitlines()


def exported_symbols(library):
    """The public symbols with their version node (pf_x@@PIPEFORGE_1); PIPEFORGE_PRIVATE (the runtime's
    C++ symbols for the CUDA backend of the same build) is not an interface and is left out."""
    out = subprocess.run(["nm", "-D", "--defined-only", library], check=True, capture_output=True, text=True).stdout
    names = {line.split()[2] for line in out.splitlines() if len(line.split()) >= 3 and line.split()[1] != "A"}
    return sorted(n for n in names if not n.endswith("@@PIPEFORGE_PRIVATE"))


def soname(library):
    out = subprocess.run(["readelf", "-d", library], check=True, capture_output=True, text=True).stdout
    m = re.search(r"\(SONAME\).*\[(.*)\]", out)
    return m.group(1) if m else "(none)"


def dump(header, library):
    functions, structs, enums = parse_header(header)
    if len(functions) < 30 or len(structs) < 10:
        sys.exit("abi_dump.py: found only %d functions and %d structs in %s; is the parser broken?"
                 % (len(functions), len(structs), header))
    entries = ["soname " + soname(library)]
    entries += ["symbol " + s for s in exported_symbols(library)]
    entries += ["function " + f for f in functions]
    entries += measured_layout(header, structs, enums)
    return sorted(set(entries))


def compare(expected, current):
    return [e for e in expected if e not in current], [c for c in current if c not in expected]


def read_abi_file(path):
    return [l.strip() for l in open(path) if l.strip() and not l.startswith("#")]


def main(argv):
    if len(argv) < 3 or argv[0] not in ("dump", "check", "update") or (argv[0] != "dump") != (len(argv) == 4):
        sys.exit(__doc__)
    current = dump(argv[1], argv[2])
    if argv[0] == "dump":
        print("\n".join(current))
        return 0
    abi_file = argv[3]
    expected = read_abi_file(abi_file)
    broken, added = compare(expected, current)
    if broken:
        print("FAIL: %d ABI promise(s) of %s broken (removed or changed):" % (len(broken), abi_file))
        print("\n".join("  - " + b for b in broken))
        by_key = {" ".join(c.split()[:2]): c for c in current}
        for b in broken:
            now = by_key.get(" ".join(b.split()[:2]))
            if now:
                print("    now: " + now)
        print("Entries may be added, never removed or changed; an incompatible change needs abi = N+1 in "
              "c_api/VERSION and a new c_api/abi/v<N+1>.txt.")
        return 1
    if argv[0] == "update":
        if added:
            with open(abi_file, "a") as f:
                f.write("\n".join(added) + "\n")
            lines = open(abi_file).read().splitlines()
            header = [l for l in lines if l.startswith("#")]
            body = sorted({l for l in lines if l.strip() and not l.startswith("#")})
            open(abi_file, "w").write("\n".join(header + body) + "\n")
        print("%s: %d entries added" % (abi_file, len(added)))
        return 0
    if added:
        print("FAIL: %d new ABI entr%s not in %s (new API is welcome: record it with "
              "`c_api/abi/update.sh`, so that removing it later is caught):"
              % (len(added), "y" if len(added) == 1 else "ies", abi_file))
        print("\n".join("  + " + a for a in added))
        return 1
    print("PASS: %s keeps all %d promises of %s" % (argv[2], len(expected), abi_file))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
