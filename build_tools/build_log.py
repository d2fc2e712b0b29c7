"""The build's output in a log file: compiler command lines and warnings go to
build/argon_build.log; the terminal gets one line per library built ("building torch_argon._C
(N units)...") on stderr, and on a failure the log's path and its last lines.

Why: the compilers print each command line (about 900 characters) and their warnings to
stdout, where they bury what the user asked for, and a reader that stops early (`main.sh --help
| head -3`) makes the next write kill the build with SIGPIPE. The redirection is of the process's
file descriptors 1 and 2, so the compilers and ninja, which setuptools starts as child processes,
write to the log as well.
"""
import contextlib
import os
import sys

LOG = os.path.join("build", "argon_build.log")
TAIL_LINES = 30


def tail(path, lines=TAIL_LINES):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


@contextlib.contextmanager
def logged(what, log=LOG):
    """Runs the body with stdout and stderr (the file descriptors) appended to `log`, after one
    "building <what>..." line on stderr. A failure of the body prints the log's path and tail to
    stderr and is raised again."""
    os.makedirs(os.path.dirname(log) or ".", exist_ok=True)
    sys.stderr.write(f"building {what}... (compiler output: {log})\n")
    sys.stderr.flush()
    sys.stdout.flush()
    saved = os.dup(1), os.dup(2)
    ok = False
    try:
        with open(log, "a") as f:
            f.write(f"==== building {what}\n")
            f.flush()
            os.dup2(f.fileno(), 1)
            os.dup2(f.fileno(), 2)
            try:
                yield
                ok = True
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
    finally:
        for fd in saved:
            os.close(fd)
        if not ok:
            sys.stderr.write(f"building {what} failed; the last lines of {log}:\n{tail(log)}\n"
                             f"(the whole log: {os.path.abspath(log)})\n")
            sys.stderr.flush()
