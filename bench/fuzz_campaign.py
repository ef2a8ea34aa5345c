"""The long fuzz campaign: N mutated routing objects (default 100,000) across every dialect,
in-process (the engine is tests/cases/fuzz_campaign.py; tests/unit/test_fuzz_campaign.py runs
a CI-sized slice of it). For each document: no exception, compile under 1 s, the neighbours'
virtual hosts and statuses unchanged, the configuration translates; every `--validate-every`th
goes to `envoy --mode validate`. Prints progress every 1000 documents and a summary; exit 1 on
any failure. Run from the repository root:

    PYTHONPATH=src python3 bench/fuzz_campaign.py --count 100000 --seed 14 --minutes 15
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the `tests` package

from tests.cases.fuzz_campaign import Campaign, Report


def summary(report: Report, elapsed: float) -> str:
    rate = report.documents / elapsed if elapsed else 0.0
    mean_ms = 1000 * report.compile_s / report.documents if report.documents else 0.0
    return (
        f"documents {report.documents} in {elapsed:.0f} s ({rate:.0f}/s); "
        f"exceptions {len(report.exceptions)}; over 1 s {len(report.slow)}; "
        f"cross-object changes {len(report.cross_object)}; "
        f"untranslatable {len(report.untranslatable)}; "
        f"envoy-validated {report.validated}, rejected {len(report.envoy_rejected)}; "
        f"compile mean {mean_ms:.1f} ms, slowest {1000 * report.slowest_s:.0f} ms"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--validate-every", type=int, default=1000)
    parser.add_argument("--minutes", type=float, default=None, help="stop after this long")
    args = parser.parse_args()
    python = f"{platform.python_implementation()} {platform.python_version()}"
    print(f"# {python}, {os.cpu_count()} cpus, seed {args.seed}", flush=True)
    campaign = Campaign(args.seed, validate_every=args.validate_every)
    deadline = None if args.minutes is None else args.minutes * 60
    started = time.monotonic()
    for report in campaign.run(args.count, deadline):
        print(summary(report, time.monotonic() - started), flush=True)
    for failure in report.failures[:50]:
        print(failure[:1000], file=sys.stderr)
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
