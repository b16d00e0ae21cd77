#!/usr/bin/env python3
# The kernels of the last complete steps of a kernel_trace.c timeline (a step starts at k_embed):
# per kernel, the time it adds to the step's end (its end past the latest end before it: with
# programmatic dependent launch a kernel starts early and waits, so its duration overstates it), its
# count and mean duration; then the first kernels of one step.
# Usage: step_timeline.py TRACE.csv [steps (default 5)] [kernels of the step listed (default 24; 0: all)]
import collections
import re
import sys


def short(name):
    name = re.sub(r"_ZN4zinc7backend4cuda\d+_GLOBAL__N__\w+?_\d+_cuda_(\w+?)_cu_\w{8}\d+", "", name)
    return re.sub(r"EEEvNS.*|EPK.*|ENS.*", "", name)[:60]


def main():
    kernels = []
    for line in open(sys.argv[1]):
        parts = line.rstrip("\n").split(",", 2)
        if len(parts) < 3 or parts[2].startswith(("API ", "MEMCPY ")):
            continue
        kernels.append((int(parts[0]), int(parts[1]), short(parts[2])))
    kernels.sort()
    steps = [i for i, k in enumerate(kernels) if "k_embed" in k[2]]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    if len(steps) < count + 1:
        sys.exit(f"{len(steps)} steps in the trace: need {count + 1}")
    first, last = steps[-count - 1], steps[-1]
    per = collections.OrderedDict()
    end = kernels[first][0]
    for start, stop, name in kernels[first:last]:
        x = per.setdefault(name, [0, 0, 0])
        x[0] += 1
        x[1] += max(0, stop - end)
        x[2] += stop - start
        end = max(end, stop)
    for name, (n, adds, dur) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        print(f"{adds / 1e3 / count:9.1f} us a step, {n // count:4d} a step, adds {adds / n / 1e3:7.2f} us, lasts {dur / n / 1e3:7.2f} us  {name}")
    print(f"step {(kernels[last][0] - kernels[first][0]) / 1e3 / count:.1f} us")
    s0 = kernels[steps[-2]][0]
    end = kernels[steps[-2]][1]
    shown = int(sys.argv[3]) if len(sys.argv) > 3 else 24
    for start, stop, name in kernels[steps[-2]:steps[-1] if shown == 0 else steps[-2] + shown]:
        print(f"  start {(start - s0) / 1e3:8.2f}  end {(stop - s0) / 1e3:8.2f}  adds {(stop - end) / 1e3:6.2f}  {name}")
        end = max(end, stop)


main()
