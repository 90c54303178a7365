#!/usr/bin/env python3
"""A stand-in for ``sacct`` on a cluster without an accounting database (no slurmdbd).

Answers the one query submitit makes, ``sacct -o JobID,State,NodeList --parsable2 -j ID ...``,
from ``scontrol -o show job ID``: slurmctld keeps finished jobs for ``MinJobAge`` seconds, and
array tasks appear as ``<array job>_<task>`` as real ``sacct`` prints them. Any other option
is ignored. A job unknown to slurmctld is left out (submitit then treats it as not done yet).
"""

from __future__ import annotations

import argparse
import subprocess
import sys

FIELDS = {"JobID", "State", "NodeList"}


def job_records(job_id: str) -> list[dict[str, str]]:
    res = subprocess.run(
        ["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, check=False
    )
    if res.returncode != 0:
        return []
    records = []
    for line in res.stdout.splitlines():
        fields = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
        if "JobId" not in fields:
            continue
        task = fields.get("ArrayTaskId")
        if task and task.isdigit():
            shown = f"{fields['ArrayJobId']}_{task}"
        elif task:  # pending tasks of an array, e.g. "2-3" or "[2-3]"
            shown = f"{fields['ArrayJobId']}_[{task.strip('[]')}]"
        else:
            shown = fields["JobId"]
        records.append(
            {
                "JobID": shown,
                "State": fields.get("JobState", ""),
                "NodeList": fields.get("NodeList", ""),
            }
        )
    return records


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("-o", "--format", default="JobID,State,NodeList")
    parser.add_argument("-j", "--jobs", action="append", default=[])
    parser.add_argument("--parsable2", "-P", action="store_true")
    args, _ = parser.parse_known_args(argv)
    columns = [c for c in args.format.split(",") if c]
    unknown = [c for c in columns if c not in FIELDS]
    if unknown:
        print(f"sacct stand-in: only {sorted(FIELDS)} are known, not {unknown}", file=sys.stderr)
        return 1
    ids = [i for group in args.jobs for i in group.split(",") if i]
    print("|".join(columns))
    seen = set()
    for job_id in ids:
        for rec in job_records(job_id.split("_")[0]):
            if rec["JobID"] not in seen:
                seen.add(rec["JobID"])
                print("|".join(rec[c] for c in columns))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
