#!/usr/bin/env python3
# tests/lint/docs_lint.py, run by docs.lint ("make check"): what the docs name exists. Reads
# README.md, every docs/*.md and every man page source (docs/man/*.in) and
# fails naming the file and line of each of these that the tree does not have:
#   * a `stagehand COMMAND` (against 'stagehand --help') and each --flag shown
#     with it (against 'stagehand COMMAND --help'; stagehandd's flags against
#     'stagehandd --help');
#   * a stagehand.conf key written `Key=...` (against lua/stagehand_conf.lua,
#     the one table of keys; Slurm's own keys, from the installed Slurm man
#     pages, and the job record fields scontrol prints are known too);
#   * a `make TARGET` (against every Makefile.am, plus automake's own);
#   * a test file (NNNN-name.bats/.py, test_*.c, *.lint) or a path under
#     tests/, scripts/, lua/, common/, daemon/, cli/, spank/;
#   * a metric (stagehand_*) against the daemon's sources.
# Only text in backticks and in fenced code blocks is read: prose may say
# anything, a name set as code is a claim. A line may opt out with the
# comment "<!-- docs.lint: ignore -->" (for names that must not exist, such
# as a planted example of a refused key).
# Speaks the plain exit-status protocol: 0 pass, 1 fail, 77 skip (no built
# stagehand binary to ask for --help).
import glob
import os
import re
import subprocess
import sys

SRC = os.environ.get("STAGEHAND_SRC_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("STAGEHAND_BUILD_DIR") or SRC
IGNORE = "<!-- docs.lint: ignore -->"


def run_help(argv):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except OSError:
        return None
    return p.stdout + p.stderr


def find_bin(rel):
    for base in (BUILD, SRC):
        f = os.path.join(base, rel)
        if os.access(f, os.X_OK):
            return f
    return None


def cli_commands(cli):
    out = run_help([cli, "--help"]) or ""
    cmds, on = set(), False
    for line in out.splitlines():
        if line.startswith("commands:"):
            on = True
            continue
        if on:
            m = re.match(r"^  ([a-z][a-z-]*)\s", line)
            if m:
                cmds.add(m.group(1))
            elif line.strip() == "":
                on = False
    return cmds


FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def help_flags(argv):
    return set(FLAG.findall(run_help(argv) or ""))


def conf_keys():
    keys = set()
    with open(os.path.join(SRC, "lua", "stagehand_conf.lua")) as f:
        for line in f:
            m = re.match(r'^\s*\{\s*"([A-Za-z0-9]+)",\s*"', line)
            if m:
                keys.add(m.group(1).lower())
    return keys


def slurm_keys():
    # Keys of slurm.conf and its friends, from the man pages Slurm installs:
    # every ".TP" item of the form \fBKey\fR.
    keys = set()
    pages = (glob.glob("/usr/share/man/man5/*.conf.5*") + glob.glob("/usr/share/man/man1/s*.1*") +
             glob.glob("/usr/share/man/man5/systemd.*.5*"))
    if not any(os.path.basename(p).startswith("slurm.conf.5") for p in pages):
        return None
    for page in pages:
        try:
            if page.endswith(".gz"):
                import gzip
                text = gzip.open(page, "rt", errors="replace").read()
            else:
                text = open(page, errors="replace").read()
        except OSError:
            continue
        for m in re.finditer(r"\\f[BI]([A-Za-z][A-Za-z0-9_]+)=?[^\\]*\\f[RP]", text):
            keys.add(m.group(1).lower())
    return keys


# Fields of the job and node records that scontrol prints (Key=value) and the
# docs quote; plugstack.conf arguments are lower-case and not checked here.
RECORD_FIELDS = {
    "jobid", "jobname", "userid", "groupid", "jobstate", "reason", "priority",
    "admincomment", "comment", "batchhost", "nodelist", "workdir", "stdout",
    "stderr", "exitcode", "runtime", "timelimit", "state", "burstbuffer",
    "burstbufferstate", "dependency", "arrayjobid", "arraytaskid", "partition",
    "submittime", "starttime", "endtime", "restarts", "requeue", "command",
    "account", "qos", "features", "numnodes", "numcpus", "nodename", "cpus",
    "realmemory", "sockets", "corespersocket", "threadspercore", "nodeaddr",
    "nodehostname", "port", "default", "maxtime", "nodes", "hetjobid",
    "hetjoboffset", "mailtype", "mailuser", "pool", "capacity", "features",
    "slurm_conf", "path",
    # burst_buffer.conf (its man page names them in prose)
    "directive", "defaultpool", "flags", "stageintimeout", "stageouttimeout",
    "validatetimeout", "otherTimeout".lower(), "pollinterval", "allowusers", "denyusers",
}

MAKE_BUILTIN = {"check", "install", "uninstall", "dist", "distcheck", "clean",
                "distclean", "all", "installcheck", "install-strip", "maintainer-clean",
                "-j2", "-C", "-j"}


def make_targets():
    targets = set()
    for mk in glob.glob(os.path.join(SRC, "**", "Makefile.am"), recursive=True):
        with open(mk) as f:
            for line in f:
                m = re.match(r"^([A-Za-z0-9_.-]+(?:\s+[A-Za-z0-9_.-]+)*)\s*:(?!=)", line)
                if m:
                    targets.update(m.group(1).split())
    return targets | MAKE_BUILTIN


def metric_names():
    names = set()
    for f in glob.glob(os.path.join(SRC, "daemon", "**", "*.c"), recursive=True):
        with open(f, errors="replace") as fh:
            names.update(re.findall(r"stagehand_[a-z0-9_]+", fh.read()))
    return names


def code_spans(path):
    """(line number, text) for each backtick span and each fenced-code line."""
    out, fence = [], False
    with open(path, errors="replace") as f:
        for n, line in enumerate(f, 1):
            if IGNORE in line:
                continue
            if line.lstrip().startswith("```"):
                fence = not fence
                continue
            if fence:
                out.append((n, line.rstrip("\n"), True))
                continue
            for m in re.finditer(r"`([^`]+)`", line):
                out.append((n, m.group(1), False))
    return out


def man_spans(path):
    """Man page sources: example blocks (.nf/.fi, .EX/.EE), .B lines and
    bold spans, roff escapes dropped; prose is not read."""
    out, ex = [], False
    with open(path, errors="replace") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if IGNORE in line or line.startswith('.\\"'):
                continue
            if line.startswith((".nf", ".EX")):
                ex = True
                continue
            if line.startswith((".fi", ".EE")):
                ex = False
                continue
            clean = lambda t: re.sub(r"\\f[BIRP]", "", t).replace("\\-", "-").replace("\\(em", "-")
            if ex:
                out.append((n, clean(line), True))
            elif line.startswith(".B ") or line.startswith(".BR "):
                out.append((n, clean(line[line.index(" ") + 1:]).replace('"', ""), True))
            else:
                for m in re.finditer(r"\\fB(.*?)\\f[RP]", line):
                    out.append((n, clean(m.group(1)), True))
    return out


TESTFILE = re.compile(r"\b(\d{4}-[a-z0-9-]+\.(?:bats|py))\b")
TREEPATH = re.compile(r"(?<![\w./-])((?:tests|scripts|lua|common|daemon|cli|spank|fuzz|etc|debian)/[A-Za-z0-9_./-]*[A-Za-z0-9_])")
MAKECMD = re.compile(r"(?:^|[\s;(&|])make\s+((?:[A-Z_]+=\S+\s+)*)([a-z][a-z0-9-]*)")
# A command line: the program at the start of a span or line (after a
# prompt, sudo or VAR=value assignments) or after ; | && ( $( .
CLICMD = re.compile(r"(?:^\s*(?:[$#]\s+)?(?:sudo\s+(?:-u\s+\S+\s+)?)?(?:[A-Z_]+=\S*\s+)*|[;|(]\s*|&&\s*)"
                    r"(?:/usr/bin/|cli/|\./)?stagehand\s+((?:--?[a-z][a-z-]*(?:[ =]\S+)?\s+)*)([a-z][a-z-]*)(?![=\w-])((?:\s+\S+)*)")
# A stagehand.conf-style key: CamelCase, at least one lower-case letter
# (ALL_CAPS=... is an environment variable).
DAEMONCMD = re.compile(r"(?<![\w/.-])(?:/usr/sbin/|daemon/)?stagehandd((?:\s+-\S+(?:\s+[^-\s]\S*)?)+)")
KEYVAL = re.compile(r"^([A-Z][a-z0-9]+[A-Za-z0-9]*)=")


def main():
    cli = os.environ.get("STAGEHAND_BIN") or find_bin("cli/stagehand")
    daemon = os.environ.get("STAGEHAND_DAEMON_BIN") or find_bin("daemon/stagehandd")
    if not os.path.isdir(os.path.join(SRC, "docs", "man")):
        print(f"SKIP: no {SRC}/docs/man (not a source tree)")
        return 77
    if not cli or not daemon:
        print("SKIP: cli/stagehand or daemon/stagehandd not built")
        return 77
    cmds = cli_commands(cli)
    if len(cmds) < 10:
        print(f"FAIL: 'stagehand --help' listed only {sorted(cmds)}: cannot check the docs against it")
        return 1
    flags_of = {}
    daemon_flags = help_flags([daemon, "--help"])
    keys = conf_keys()
    skeys = slurm_keys()
    if skeys is None:
        print("note: no slurm.conf(5) installed: keys are not checked")
    else:
        skeys |= RECORD_FIELDS
    targets = make_targets()
    metrics = metric_names()
    tests = {os.path.basename(p) for p in glob.glob(os.path.join(SRC, "tests", "**", "*"), recursive=True)}

    files = [os.path.join(SRC, "README.md")] + sorted(glob.glob(os.path.join(SRC, "docs", "*.md")))
    mans = sorted(glob.glob(os.path.join(SRC, "docs", "man", "*.in")))
    bad = []
    # A release tarball (make distdir: the sanitizer build, distcheck) need
    # not ship every file the docs name (fuzz/corpus, the bench outputs):
    # tree paths are checked in a git checkout only.
    in_git = os.path.exists(os.path.join(SRC, ".git"))
    if not in_git:
        print("note: not a git checkout: tree paths are not checked")

    def cmd_flags(cmd):
        if cmd not in flags_of:
            flags_of[cmd] = help_flags([cli, cmd, "--help"]) | help_flags([cli, "--help"])
        return flags_of[cmd]

    def check(rel, n, text, block):
        for m in CLICMD.finditer(text):
            cmd = m.group(2)
            if cmd not in cmds:
                # 'stagehand check', 'stagehand is ...': only a lower-case word
                # right after the program in code is a command.
                bad.append(f"{rel}:{n}: 'stagehand {cmd}': no such command (stagehand --help)")
                continue
            rest = m.group(3) or ""
            rest = re.split(r"[|;&#]", rest)[0]
            for fl in FLAG.findall(rest):
                if fl not in cmd_flags(cmd):
                    bad.append(f"{rel}:{n}: 'stagehand {cmd} {fl}': no such flag (stagehand {cmd} --help)")
        for m in DAEMONCMD.finditer(text):
            for fl in FLAG.findall(re.split(r"[|;&#]", m.group(1))[0]):
                if fl not in daemon_flags:
                    bad.append(f"{rel}:{n}: 'stagehandd {fl}': no such flag (stagehandd --help)")
        for m in MAKECMD.finditer(text):
            t = m.group(2)
            if t not in targets:
                bad.append(f"{rel}:{n}: 'make {t}': no such target in any Makefile.am")
        for t in TESTFILE.findall(text):
            if t not in tests:
                bad.append(f"{rel}:{n}: test file '{t}' does not exist under tests/")
        for p in (TREEPATH.findall(text) if in_git else []):
            p = p.rstrip(".")
            if any(c in p for c in "*<>{}") or p.endswith("/") or re.search(r"[A-Z]{4,}|xx", p):
                continue  # a pattern or a placeholder (NNNN, FOLDER, 02xx)
            if p.startswith(("fuzz/out", "tests/bench/out", "test-logs")):
                continue  # made by a run
            if not (os.path.exists(os.path.join(SRC, p)) or os.path.exists(os.path.join(BUILD, p)) or
                    os.path.exists(os.path.join(SRC, p + ".in")) or glob.glob(os.path.join(SRC, p) + "*")):
                bad.append(f"{rel}:{n}: '{p}' does not exist in the tree")
        for mt in re.findall(r"\bstagehand_[a-z0-9_]+", text):
            if mt.endswith(("_bucket", "_sum", "_count")):
                mt = re.sub(r"_(bucket|sum|count)$", "", mt)
            if mt.startswith(("stagehand_dsl", "stagehand_conf", "stagehand_bb")) or mt in metrics:
                continue
            if mt.endswith("_") and any(x.startswith(mt) for x in metrics):
                continue  # a family: stagehand_pace_fs_*
            if re.match(r"stagehand_(hold|purge|archive|exempt|skip)", mt):
                continue  # Robinhood and GPFS rule names the exports write
            bad.append(f"{rel}:{n}: metric '{mt}' is not in the daemon's sources")
        if skeys is not None and (not block or rel.startswith("docs/man")):
            for tok in re.split(r"\s+", text.strip()):
                m = KEYVAL.match(tok)
                if m and m.group(1) != "Key" and m.group(1).lower() not in keys and m.group(1).lower() not in skeys:
                    bad.append(f"{rel}:{n}: key '{m.group(1)}=' is neither a stagehand.conf key (lua/stagehand_conf.lua) nor Slurm's")

    for path in files:
        rel = os.path.relpath(path, SRC)
        for n, text, block in code_spans(path):
            check(rel, n, text, block)
    for path in mans:
        rel = os.path.relpath(path, SRC)
        for n, text, block in man_spans(path):
            check(rel, n, text, block)
    for b in bad:
        print("FAIL: " + b)
    if bad:
        print(f"FAIL: {len(bad)} names in the docs that the tree does not have: fix the doc (or the code)")
        return 1
    print(f"PASS: {len(files) + len(mans)} docs: every command, flag, key, make target, test file, path and metric named exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
