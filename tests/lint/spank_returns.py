#!/usr/bin/env python3
"""Every SPANK hook of spank/*.c returns 0 or a negative value.

Slurm 25.05 and later take any non-zero return of a slurm_spank_* function
as an error (older releases only a negative one), and the ESPANK_* codes
are positive: "return ESPANK_ERROR;" or "return rc;" with rc holding a
spank_get_item() result would fail the step on one release and not on the
other.

What a hook may return, read from the source with comments and strings
blanked (the plugin's hooks are short and written to be read this way):
  * 0, or a negative integer literal (-1);
  * C ? A : B with A and B allowed;
  * a local variable whose every assignment in the hook (its initialiser
    included) is allowed;
  * a call to a static function of the same file whose every return is
    allowed, by the same rules.
Anything else fails, naming the file, line and hook. Exit 0 pass, 1 fail.
"""
import os
import re
import sys

SRC = os.environ.get("STAGEHAND_SRC_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
SPANK = os.path.join(SRC, "spank")


def blank(text):
    """text with comments, strings and char literals as spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c, c2 = text[i], text[i:i + 2]
        if c2 == "/*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c2 == "//":
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j]) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


FUNC = re.compile(r"^(static\s+)?(?:[A-Za-z_][\w\s\*]*?)\b([A-Za-z_]\w*)\s*\(([^;{]*?)\)\s*\{", re.M | re.S)


def functions(text):
    """{name: (is_static, body_start, body_end)} of the file's function definitions."""
    out = {}
    for m in FUNC.finditer(text):
        start = m.end() - 1
        depth, i = 0, start
        while i < len(text):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        out[m.group(2)] = (bool(m.group(1)), start, i)
    return out


def split_ternary(e):
    """(cond, a, b) of a top-level C ? A : B, or None."""
    depth, q = 0, -1
    for i, c in enumerate(e):
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == "?" and depth == 0 and q < 0:
            q = i
        elif c == ":" and depth == 0 and q >= 0:
            return e[:q], e[q + 1:i], e[i + 1:]
    return None


def strip_parens(e):
    e = e.strip()
    while e.startswith("(") and e.endswith(")"):
        depth = 0
        for i, c in enumerate(e):
            depth += c == "("
            depth -= c == ")"
            if depth == 0 and i < len(e) - 1:
                return e
        e = e[1:-1].strip()
    return e


class Checker:
    def __init__(self, text, funcs):
        self.text, self.funcs, self.seen = text, funcs, {}

    def body(self, name):
        _, s, e = self.funcs[name]
        return self.text[s:e + 1], s

    def allowed(self, expr, fname, depth=0):
        """None if expr may be returned by fname, else why not."""
        e = strip_parens(expr)
        if re.fullmatch(r"0|-\s*\d+", e):
            return None
        t = split_ternary(e)
        if t:
            return self.allowed(t[1], fname, depth) or self.allowed(t[2], fname, depth)
        if re.fullmatch(r"[A-Za-z_]\w*", e):
            if e.startswith("ESPANK_") or e.isupper():
                return "'%s' is a positive constant (ESPANK_* codes are all > 0)" % e
            return self.variable(e, fname, depth)
        m = re.fullmatch(r"([A-Za-z_]\w*)\s*\(.*\)", e, re.S)
        if m and m.group(1) in self.funcs and self.funcs[m.group(1)][0]:
            return self.function(m.group(1), depth + 1)
        return "'%s' is not 0, a negative literal, or a variable or static function that only holds those" % e

    def variable(self, var, fname, depth):
        body, _ = self.body(fname)
        assigns = re.findall(r"\b%s\s*(?<![=!<>])=(?!=)\s*([^;]*);" % re.escape(var), body)
        assigns += re.findall(r"\b%s\s*(?:[-+*/|&]=|\+\+|--)" % re.escape(var), body) and ["<compound>"] or []
        if not assigns:
            return "'%s' is never assigned in %s" % (var, fname)
        for a in assigns:
            if a == "<compound>":
                return "'%s' is changed by a compound assignment in %s" % (var, fname)
            why = self.allowed(a, fname, depth)
            if why:
                return "'%s' may hold: %s" % (var, why)
        return None

    def function(self, name, depth):
        if depth > 8:
            return "calls nest too deep to follow (%s)" % name
        if name in self.seen:
            return self.seen[name]
        self.seen[name] = None  # recursion: judged by its other returns
        self.seen[name] = self.returns(name, depth)
        return self.seen[name]

    def returns(self, name, depth=0):
        """None, or why one of name's returns is not allowed (with its line)."""
        body, start = self.body(name)
        found = False
        for m in re.finditer(r"\breturn\b([^;]*);", body):
            found = True
            why = self.allowed(m.group(1), name, depth)
            if why:
                line = self.text.count("\n", 0, start + m.start()) + 1
                return "line %d: %s" % (line, why)
        return None if found else "%s never returns a value" % name


def main():
    bad = hooks = 0
    for fn in sorted(os.listdir(SPANK)):
        if not fn.endswith(".c"):
            continue
        path = os.path.join(SPANK, fn)
        with open(path, encoding="utf-8") as f:
            text = blank(f.read())
        funcs = functions(text)
        chk = Checker(text, funcs)
        for name in sorted(funcs):
            if not name.startswith("slurm_spank_") or funcs[name][0]:
                continue
            hooks += 1
            why = chk.returns(name)
            if why:
                bad += 1
                print("spank/%s: %s: %s: a SPANK hook must return 0 or a negative "
                      "value (Slurm 25.05+ fails the step on any other); return -1 "
                      "for an error" % (fn, name, why))
    if hooks == 0:
        print("spank/: no slurm_spank_* hook found: the lint no longer reads the plugin")
        return 1
    if not bad:
        print("%d SPANK hooks return only 0 or a negative value" % hooks)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
