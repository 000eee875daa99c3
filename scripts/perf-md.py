#!/usr/bin/env python3
"""Renders threadstream-bench JSON reports (`--json`) as the per-scenario sections of
docs/performance.md: `python3 scripts/perf-md.py perf.json [more.json …] > sections.md`."""
import json
import sys


def fmt_num(x):
    if x is None:
        return "–"
    if x >= 100:
        return f"{x:,.0f}"
    return f"{x:,.2f}"


def ms(lat, key):
    if not lat or lat.get(key) is None:
        return "–"
    return f"{lat[key]:.2f}"


def section(r):
    out = [f"### {r['scenario']}", ""]
    out.append(f"Reproduce: `./target/release/threadstream-bench {r['scenario']} --json {r['scenario']}.json`  ")
    out.append(f"Load average at start: {r['machine']['load_avg_at_start']}")
    out.append("")
    out.append("| configuration | kind | throughput | p50 ms | p99 ms | max ms | RSS max MB | CPU % | machine busy % |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in r["rows"]:
        u = row.get("usage") or {}
        lat = row.get("latency")
        rss = u.get("rss_max_kb")
        out.append(
            "| {} | {} | {} {} | {} | {} | {} | {} | {} | {} |".format(
                row["name"], row["kind"], fmt_num(row["throughput"]), row["unit"],
                ms(lat, "p50_ms"), ms(lat, "p99_ms"), ms(lat, "max_ms"),
                f"{rss/1024:.1f}" if rss else "–",
                f"{u['cpu_percent']:.0f}" if u.get("cpu_percent") is not None else "–",
                f"{u['machine_busy_percent']:.0f}" if u.get("machine_busy_percent") is not None else "–",
            )
        )
    out.append("")
    if r.get("ratios"):
        out.append("Ratios: " + ", ".join(f"{k} = **{v}**" for k, v in r["ratios"].items()))
        out.append("")
    for c in r.get("checks", []):
        out.append(f"- **{'met' if c['met'] else 'NOT met'}** — {c['target']}: {c['measured']}")
    for n in r.get("notes", []):
        out.append(f"- note: {n}")
    for row in r["rows"]:
        if row.get("extra"):
            out.append(f"- `{row['name']}`: {json.dumps(row['extra'], ensure_ascii=False)}")
    out.append("")
    return "\n".join(out)


reports = []
for path in sys.argv[1:]:
    d = json.load(open(path))
    reports.extend(d if isinstance(d, list) else [d])
print("\n".join(section(r) for r in reports))
