"""A StableHLO module's text made into functions another module can hold.

A kernel's module (from `jax.jit(...).lower(...)` or a user) has an entry
`@main` and maybe helpers. To be called from a torch-pjrt program, each of
its functions becomes private and takes a prefix unique to the kernel and
its shapes, so two kernels (or one kernel at two shapes) never clash; the
entry's argument and result attributes (layouts, donation marks, result
names) and location information go. What is left is plain text the C++
builder prints after `@main` and calls with `func.call`.

The scanner below reads the printed form MLIR writes (pretty or generic):
it tracks brackets and string literals, nothing more. It refuses what it
cannot place: top-level ops other than functions (a sharding mesh), or an
entry it cannot find.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["KernelModule", "parse_module", "custom_calls_in", "KernelModuleError"]


class KernelModuleError(ValueError):
    """The module text is not one torch-pjrt can call."""


@dataclass
class KernelModule:
    symbol: str                      # the entry, renamed
    text: str                        # every function, private and renamed
    params: list[str]                # the entry's argument types, as MLIR writes them
    results: list[str]               # its result types


_OPEN = {"(": ")", "[": "]", "{": "}", "<": ">"}
_CLOSE = {v: k for k, v in _OPEN.items()}


def _skip_string(text: str, i: int) -> int:
    """`text[i]` is a quote: the index after the closing one."""
    i += 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return i + 1
        i += 1
    raise KernelModuleError("unterminated string literal in the module")


def _match(text: str, i: int) -> int:
    """`text[i]` opens a bracket: the index after the one that closes it.
    `<` counts only as a type's bracket (after a letter: `tensor<`), since
    `->` and comparisons also use the sign."""
    stack = [text[i]]
    i += 1
    while i < len(text):
        c = text[i]
        if c == '"':
            i = _skip_string(text, i)
            continue
        if c in "([{" or (c == "<" and text[i - 1].isalnum()):
            stack.append(c)
        elif c in ")]}" or (c == ">" and stack[-1] == "<" and text[i - 1] != "-"):
            if _OPEN[stack[-1]] != c:
                raise KernelModuleError(f"unbalanced '{c}' in the module text")
            stack.pop()
            if not stack:
                return i + 1
        i += 1
    raise KernelModuleError("unbalanced brackets in the module text")


def _strip_locations(text: str) -> str:
    """Drops `#loc = ...` alias lines and every ` loc(...)` (they may nest)."""
    text = "\n".join(line for line in text.splitlines() if not line.startswith("#loc"))
    out, i = [], 0
    while True:
        j = text.find("loc(", i)
        while j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_.#%@"):
            j = text.find("loc(", j + 1)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:j].rstrip(" "))
        i = _match(text, j + 3)


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Splits on `sep` outside brackets and strings."""
    parts, start, i = [], 0, 0
    while i < len(text):
        c = text[i]
        if c == '"':
            i = _skip_string(text, i)
            continue
        if c in "([{" or (c == "<" and i and text[i - 1].isalnum()):
            i = _match(text, i)
            continue
        if c == sep:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _type_of(entry: str) -> str:
    """`%arg0: tensor<2xf32> {attrs}` or `tensor<2xf32> {attrs}` -> the type."""
    if entry.startswith("%"):
        entry = entry.split(":", 1)[1].strip()
    i = 0
    while i < len(entry):
        c = entry[i]
        if c == "<" and i and entry[i - 1].isalnum():
            i = _match(entry, i)
            continue
        if c == "{" or c.isspace():
            break
        i += 1
    return entry[:i]


_SYMBOL = re.compile(r'@("(?:[^"\\]|\\.)*"|[A-Za-z_][\w$.\-]*)')
_CUSTOM_CALL = re.compile(r'stablehlo\.custom_call\s+@([\w$.\-]+)|call_target_name\s*=\s*"([^"]*)"')


def custom_calls_in(text: str) -> list[str]:
    """The custom call targets a module's text names, in either printed form."""
    return sorted({m.group(1) or m.group(2) for m in _CUSTOM_CALL.finditer(text)})


@dataclass
class _Function:
    name: str
    args: list[str]        # "%arg0: type" entries, attributes kept
    results: list[str]     # types, attributes kept
    body: str              # from the "{" of the body to its "}"


def _functions(text: str) -> list[_Function]:
    text = _strip_locations(text).strip()
    if not text.startswith("module"):
        raise KernelModuleError("expected a 'module' (StableHLO MLIR text)")
    i = len("module")
    m = re.compile(r"\s*(@[\w$.\-]+|@\"[^\"]*\")?\s*").match(text, i)
    i = m.end()
    if text.startswith("attributes", i):
        i = text.index("{", i)
        i = _match(text, i)
    while text[i].isspace():
        i += 1
    if text[i] != "{":
        raise KernelModuleError("expected the module's body after its name and attributes")
    end = _match(text, i)
    body = text[i + 1:end - 1]
    functions, j = [], 0
    while j < len(body):
        if body[j].isspace():
            j += 1
            continue
        if not body.startswith("func.func", j):
            op = body[j:].split(None, 1)[0]
            raise KernelModuleError(
                f"the module holds a top-level '{op}', not a function; only func.func "
                "definitions can be called (export without sharding annotations)")
        j += len("func.func")
        m = re.compile(r"\s*(?:(public|private|nested)\s+)?@([\w$.\-]+|\"[^\"]*\")\s*").match(body, j)
        if not m:
            raise KernelModuleError("a func.func without a symbol name")
        name = m.group(2)
        j = m.end()
        if body[j] != "(":
            raise KernelModuleError(f"@{name}: expected its argument list")
        close = _match(body, j)
        args = _split_top(body[j + 1:close - 1])
        j = close
        results: list[str] = []
        rest = body[j:].lstrip()
        j = len(body) - len(rest)
        if rest.startswith("->"):
            j += 2
            while body[j].isspace():
                j += 1
            if body[j] == "(":
                close = _match(body, j)
                results = _split_top(body[j + 1:close - 1])
                j = close
            else:
                k = j
                while not body[k].isspace() and body[k] != "{":
                    k = _match(body, k) if body[k] == "<" else k + 1
                results = [body[j:k]]  # a lone result carries no attributes
                j = k
        rest = body[j:].lstrip()
        j = len(body) - len(rest)
        if rest.startswith("attributes"):
            j = _match(body, body.index("{", j))
            rest = body[j:].lstrip()
            j = len(body) - len(rest)
        if body[j] != "{":
            raise KernelModuleError(f"@{name}: expected its body")
        close = _match(body, j)
        functions.append(_Function(name, args, results, body[j:close]))
        j = close
    return functions


def parse_module(text: str, prefix: str, entry: str = "main") -> KernelModule:
    """Renames every function of `text` to `<prefix>_<name>`, privately;
    `entry` (or the only public function) becomes `symbol`."""
    functions = _functions(text)
    if not functions:
        raise KernelModuleError("the module defines no function")
    names = {f.name for f in functions}
    if entry not in names:
        if len(functions) == 1:
            entry = functions[0].name
        else:
            raise KernelModuleError(f"the module has no @{entry} among {sorted(names)}")

    def renamed(name: str) -> str:
        bare = name.strip('"')
        return f"{prefix}_{re.sub(r'[^A-Za-z0-9_]', '_', bare)}"

    def rename_refs(s: str) -> str:
        return _SYMBOL.sub(lambda m: "@" + renamed(m.group(1)) if m.group(1) in names else m.group(0), s)

    out = []
    for f in functions:
        args = []
        for k, a in enumerate(f.args):
            if not a.startswith("%"):
                raise KernelModuleError(f"@{f.name}: argument {k} has no name ('{a}')")
            args.append(a.split(":", 1)[0].strip() + ": " + _type_of(a))
        results = [_type_of(r) for r in f.results]
        sig = "(" + ", ".join(results) + ")"
        out.append(f"  func.func private @{renamed(f.name)}({', '.join(args)}) -> {sig} "
                   f"{rename_refs(f.body)}\n")
    main = next(f for f in functions if f.name == entry)
    return KernelModule(symbol=renamed(entry), text="".join(out),
                        params=[_type_of(a) for a in main.args],
                        results=[_type_of(r) for r in main.results])
