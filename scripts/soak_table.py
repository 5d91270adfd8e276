"""Summarise soak reports (docs/soak/*.json) as the markdown table in docs/soak.md.

Exits 1 when any report is partial or has a verdict other than pass or skip, so `nox -s soak`
fails on a false alarm.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ORDER = ("reference", "reference_sdpa", "torch_mha", "sdpa", "hf_gpt2")


def _span(props: list[dict], axis: str) -> str:
    spans = [p["drawn"][axis] for p in props if p.get("drawn") and axis in p["drawn"]]
    if not spans:
        return "?"
    return f"{min(s[0] for s in spans)}–{max(s[1] for s in spans)}"


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
    shapes = [p["drawn"]["shapes"] for p in forward if p.get("drawn")]
    per_property = sorted({p["examples"] for p in ran})
    cells = [
        f"`{report['subject']}`",
        f"{len(ran) - len(bad)} of {len(ran)} pass" + (f"; skipped: {', '.join(skipped)}"
                                                      if skipped else "")
        + (f"; **not run**: {', '.join(not_run)}" if not_run else ""),
        ", ".join(f"{n:,}" for n in per_property),
        f"{sum(p['examples'] for p in ran):,}",
        f"**{len(bad)}**" + (f" ({', '.join(p['id'] + ' ' + p['verdict'] for p in bad)})"
                             if bad else ""),
        _span(forward, "B"), _span(forward, "T"), _span(forward, "C"), _span(forward, "H"),
        f"{min(shapes)}–{max(shapes)}" if shapes else "?",
        ", ".join(f"{name} {n:,}" for name, n in sorted(dtypes.items())),
        f"{sum(p['seconds'] for p in props):,.0f}",
    ]
    return "| " + " | ".join(cells) + " |", not bad and not not_run and not report["partial"]


def main(directory: str = "docs/soak") -> int:
    reports = {}
    for path in sorted(Path(directory).glob("*.json")):
        report = json.loads(path.read_text())
        reports[report["subject"].rpartition(".")[2]] = report
    if not reports:
        print(f"no soak reports in {directory}", file=sys.stderr)
        return 1
    print("| subject | properties | examples per property | examples | failures | B | T | C | H "
          "| distinct shapes per property | runs per dtype | seconds in properties |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    clean = True
    for name in sorted(reports, key=lambda n: ORDER.index(n) if n in ORDER else len(ORDER)):
        line, ok = row(reports[name])
        print(line)
        clean &= ok
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
