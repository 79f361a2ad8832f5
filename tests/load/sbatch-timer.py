#!/usr/bin/env python3
"""Submit a batch script N times with sbatch and time every call.

Run as the submitting user. Prints one line per job: "<job id> <seconds>"
(job id "-" and the error on stderr if sbatch failed).

    sbatch-timer.py SCRIPT N [--threads T] [--hold] [--workdir DIR]
"""
import argparse
import subprocess
import sys
import threading
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("script")
    ap.add_argument("n", type=int)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--hold", action="store_true")
    ap.add_argument("--workdir", default=".")
    a = ap.parse_args()

    cmd = ["sbatch", "--parsable"] + (["--hold"] if a.hold else []) + [a.script]
    lock = threading.Lock()
    left = [a.n]
    out = []

    def worker():
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            t0 = time.perf_counter()
            p = subprocess.run(cmd, cwd=a.workdir, capture_output=True, text=True)
            dt = time.perf_counter() - t0
            jid = p.stdout.strip().split(";")[0]
            with lock:
                if p.returncode != 0 or not jid.isdigit():
                    sys.stderr.write("sbatch failed (%d): %s%s" % (p.returncode, p.stdout, p.stderr))
                    out.append(("-", dt))
                else:
                    out.append((jid, dt))

    ts = [threading.Thread(target=worker) for _ in range(a.threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for jid, dt in out:
        print("%s %.6f" % (jid, dt))


if __name__ == "__main__":
    main()
