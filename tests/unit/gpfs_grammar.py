#!/usr/bin/env python3
"""gpfs_grammar.py - check Storage Scale ILM rules against a grammar of the
subset stagehand exports (policy export --format=gpfs).

    policy    := { comment | rule }
    rule      := RULE name ( EXCLUDE [DIRECTORIES_PLUS]
                           | MIGRATE [FROM POOL string] TO POOL string )
                 WHERE cond
    cond      := term { OR term }
    term      := XATTR '(' string ')' IN '(' string { ',' string } ')'
               | PATH_NAME LIKE string ESCAPE string
    string    := "'" { char | "''" } "'"      (no newline inside)
    name      := string, unique per file

Also checked: an ESCAPE string is one character, and every escape character
in a LIKE pattern is followed by %, _ or the escape character itself.
Usage: gpfs_grammar.py FILE...   (exit 0 valid, 1 invalid with file:line)
"""
import re
import sys

KEYWORDS = {"RULE", "EXCLUDE", "DIRECTORIES_PLUS", "MIGRATE", "FROM", "POOL", "TO",
            "WHERE", "XATTR", "IN", "PATH_NAME", "LIKE", "ESCAPE", "OR"}


class Bad(Exception):
    pass


def tokens(text):
    i, line, n = 0, 1, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c in " \t\r":
            i += 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise Bad(f"line {line}: unterminated comment")
            line += text.count("\n", i, j)
            i = j + 2
        elif c == "'":
            j, val = i + 1, []
            while True:
                if j >= n or text[j] == "\n":
                    raise Bad(f"line {line}: unterminated string")
                if text[j] == "'":
                    if j + 1 < n and text[j + 1] == "'":
                        val.append("'")
                        j += 2
                        continue
                    break
                val.append(text[j])
                j += 1
            yield ("str", "".join(val), line)
            i = j + 1
        elif c in "(),":
            yield (c, c, line)
            i += 1
        else:
            m = re.match(r"[A-Za-z_][A-Za-z0-9_]*", text[i:])
            if not m:
                raise Bad(f"line {line}: unexpected character {c!r}")
            w = m.group(0)
            if w.upper() not in KEYWORDS:
                raise Bad(f"line {line}: unknown word {w!r}")
            yield ("kw", w.upper(), line)
            i += len(w)


class Parser:
    def __init__(self, text):
        self.t = list(tokens(text))
        self.i = 0
        self.names = set()

    def peek(self, kind=None, val=None):
        if self.i >= len(self.t):
            return None
        k, v, _ = self.t[self.i]
        if (kind and k != kind) or (val and v != val):
            return None
        return self.t[self.i]

    def take(self, kind, val=None):
        tok = self.peek(kind, val)
        if not tok:
            got = self.t[self.i] if self.i < len(self.t) else ("end", "end of file", "?")
            raise Bad(f"line {got[2]}: expected {val or kind}, got {got[1]!r}")
        self.i += 1
        return tok

    def policy(self):
        rules = 0
        while self.peek():
            self.rule()
            rules += 1
        if rules == 0:
            raise Bad("no rules")
        return rules

    def rule(self):
        self.take("kw", "RULE")
        _, name, line = self.take("str")
        if not name or name in self.names:
            raise Bad(f"line {line}: rule name {name!r} empty or used twice")
        self.names.add(name)
        if self.peek("kw", "EXCLUDE"):
            self.i += 1
            if self.peek("kw", "DIRECTORIES_PLUS"):
                self.i += 1
        else:
            self.take("kw", "MIGRATE")
            if self.peek("kw", "FROM"):
                self.i += 1
                self.take("kw", "POOL")
                self.take("str")
            self.take("kw", "TO")
            self.take("kw", "POOL")
            self.take("str")
        self.take("kw", "WHERE")
        self.term()
        while self.peek("kw", "OR"):
            self.i += 1
            self.term()

    def term(self):
        if self.peek("kw", "XATTR"):
            self.i += 1
            self.take("(")
            self.take("str")
            self.take(")")
            self.take("kw", "IN")
            self.take("(")
            self.take("str")
            while self.peek(","):
                self.i += 1
                self.take("str")
            self.take(")")
            return
        self.take("kw", "PATH_NAME")
        self.take("kw", "LIKE")
        _, pat, line = self.take("str")
        self.take("kw", "ESCAPE")
        _, esc, _ = self.take("str")
        if len(esc) != 1:
            raise Bad(f"line {line}: ESCAPE must be one character")
        k = 0
        while k < len(pat):
            if pat[k] == esc:
                if k + 1 >= len(pat) or pat[k + 1] not in ("%", "_", esc):
                    raise Bad(f"line {line}: escape character not followed by %, _ or itself")
                k += 2
            else:
                k += 1


def main(paths):
    rc = 0
    for p in paths:
        try:
            with open(p, encoding="utf-8") as f:
                n = Parser(f.read()).policy()
            print(f"{p}: {n} rule(s) valid")
        except Bad as e:
            print(f"{p}: {e}")
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
