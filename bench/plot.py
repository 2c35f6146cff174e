"""Plot a results.json: latency distribution and CPU per replica, per scheduler (matplotlib, peers venv)."""

from __future__ import annotations

import json
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main(src: str, dst: str) -> None:
    with open(src) as fh:
        data = json.load(fh)
    scenarios = sorted({r["scenario"] for r in data["runs"]})
    fig, axes = plt.subplots(2, len(scenarios), figsize=(7 * len(scenarios), 9), squeeze=False)
    for col, sc in enumerate(scenarios):
        lat: dict[str, list[float]] = defaultdict(list)
        cpu: dict[str, list[float]] = defaultdict(list)
        for r in data["runs"]:
            if r["scenario"] == sc:
                lat[r["scheduler"]] += [max(1.0, v) for v in r["latencies"]]
                cpu[r["scheduler"]] += r["cpu_replicas_s"]
        names = [n for n in lat if lat[n]]  # a scheduler with no start in the window has no box
        ax = axes[0][col]
        ax.boxplot([lat[n] for n in names], orientation="horizontal", whis=(1, 99), showfliers=False)
        ax.set_yticks(range(1, len(names) + 1), names)
        ax.set_xscale("log")
        ax.set_xlabel("due-to-start latency, ms (log; box p25 to p75, whiskers p1 to p99)")
        ax.set_title(f"Scenario {sc}: latency")
        ax = axes[1][col]
        names = list(cpu)
        ax.barh(names, [max(cpu[n]) if cpu[n] else 0 for n in names], color="#bbb", label="max replica")
        ax.barh(names, [min(cpu[n]) if cpu[n] else 0 for n in names], color="#369", label="min replica")
        ax.set_xlabel(f"CPU seconds per replica over {data['meta']['durations'][sc]:.0f} s")
        ax.set_title(f"Scenario {sc}: CPU per replica")
        ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(dst, dpi=90)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
