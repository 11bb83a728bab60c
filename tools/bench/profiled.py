"""Run a console script with yappi ready to profile all its threads.

    python tools/bench/profiled.py OUT module:function [args ...]

``module:function`` is the entry point (``cyborg.cmd.conductor:main``),
run with ``args`` as its command line. Nothing is profiled until the
process gets SIGUSR1: from then on every thread's CPU time (yappi's CPU
clock: a thread waiting on a socket costs nothing), until SIGUSR2, which
writes the stats to ``OUT`` in pstats format. cProfile sees only the
thread that started it; a service does its work on the threads of its
RPC server.
"""

import importlib
import signal
import sys

import yappi


def main():
    out, entry = sys.argv[1], sys.argv[2]
    module, function = entry.split(':')
    sys.argv = [entry] + sys.argv[3:]

    def start(signum, frame):
        yappi.clear_stats()
        yappi.set_clock_type('cpu')
        yappi.start(builtins=False, profile_threads=True)

    def stop(signum, frame):
        yappi.stop()
        yappi.get_func_stats().save(out, type='pstat')

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    return getattr(importlib.import_module(module), function)()


if __name__ == '__main__':
    sys.exit(main())
