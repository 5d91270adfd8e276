"""Summarise soak reports (docs/soak/NAME.seedN.json) as the markdown table in docs/soak.md,
one row per subject, its seeds' examples added up.

Exits 1 when any report is partial or has a verdict other than pass or skip, so `nox -s soak`
fails on a false alarm.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from attnspec.subjects import BUILTIN

ORDER = (*BUILTIN, "batch_position_rounding")


def _span(props: list[dict], axis: str) -> str:
    spans = [p["drawn"][axis] for p in props if p.get("drawn") and axis in p["drawn"]]
    if not spans:
        return "?"
    return f"{min(s[0] for s in spans)}–{max(s[1] for s in spans)}"


def merge(reports: list[dict]) -> dict:
    """One subject's reports (one per seed) as one: examples, seconds and drawn added up."""
    merged = {"subject": reports[0]["subject"], "partial": any(r["partial"] for r in reports),
              "seeds": sorted(r.get("seed") for r in reports), "dtypes": reports[0]["dtypes"],
              "properties": []}
    for i, first in enumerate(reports[0]["properties"]):
        runs = [r["properties"][i] for r in reports]
        bad = [p for p in runs if p["verdict"] not in ("pass", "skip")]
        drawn: dict = {}
        for p in runs:
            for key, value in (p.get("drawn") or {}).items():
                if isinstance(value, list):  # [min, max]
                    old = drawn.get(key, value)
                    drawn[key] = [min(old[0], value[0]), max(old[1], value[1])]
                elif isinstance(value, dict):  # runs per dtype or device
                    counts = drawn.setdefault(key, {})
                    for name, n in value.items():
                        counts[name] = counts.get(name, 0) + n
                else:  # distinct shapes: summed over seeds, an upper bound
                    drawn[key] = drawn.get(key, 0) + value
        merged["properties"].append({
            "id": first["id"], "verdict": bad[0]["verdict"] if bad else first["verdict"],
            "message": first["message"], "examples": sum(p["examples"] for p in runs),
            "seconds": sum(p["seconds"] for p in runs), "drawn": drawn or None})
    return merged


def row(report: dict) -> tuple[str, bool]:
    props = report["properties"]
    ran = [p for p in props if p["verdict"] not in ("skip", "not_run")]
    bad = [p for p in ran if p["verdict"] != "pass"]
    not_run = [p["id"] for p in props if p["verdict"] == "not_run"]
    skipped = [f"{p['id']} ({p['message']})" for p in props if p["verdict"] == "skip"]
    # Properties that ran tensors count dtypes; divisibility only calls build, on invalid (C, H).
    forward = [p for p in ran if "dtype" in (p.get("drawn") or {})]
    dtypes: dict[str, int] = {}
    for p in forward:
        for name, n in (p.get("drawn") or {}).get("dtype", {}).items():
            dtypes[name] = dtypes.get(name, 0) + n
    per_property = sorted({p["examples"] for p in ran})
    cells = [
        f"`{report['subject']}`",
        f"{len(ran) - len(bad)} of {len(ran)} pass" + (f"; skipped: {', '.join(skipped)}"
                                                      if skipped else "")
        + (f"; **not run**: {', '.join(not_run)}" if not_run else ""),
        ", ".join(map(str, report.get("seeds", []))),
        ", ".join(f"{n:,}" for n in per_property),
        f"{sum(p['examples'] for p in ran):,}",
        f"**{len(bad)}**" + (f" ({', '.join(p['id'] + ' ' + p['verdict'] for p in bad)})"
                             if bad else ""),
        _span(forward, "B"), _span(forward, "T"), _span(forward, "C"), _span(forward, "H"),
        ", ".join(f"{name} {n:,}" for name, n in sorted(dtypes.items())),
        f"{sum(p['seconds'] for p in props):,.0f}",
    ]
    return "| " + " | ".join(cells) + " |", not bad and not not_run and not report["partial"]


def main(directory: str = "docs/soak") -> int:
    by_subject: dict[str, list[dict]] = {}
    for path in sorted(Path(directory).glob("*.json")):
        report = json.loads(path.read_text())
        name = report["subject"].rpartition(".")[2].removeprefix("attnspec_subject_")
        by_subject.setdefault(name, []).append(report)
    if not by_subject:
        print(f"no soak reports in {directory}", file=sys.stderr)
        return 1
    print("| subject | properties | seeds | examples per property | examples | failures | B | T "
          "| C | H | runs per dtype | seconds in properties |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    clean = True
    for name in sorted(by_subject, key=lambda n: ORDER.index(n) if n in ORDER else len(ORDER)):
        line, ok = row(merge(by_subject[name]))
        print(line)
        clean &= ok
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
