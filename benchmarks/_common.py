"""What the torch-level benchmark scripts share: the plugin's facts, the
machine's load (CPU baselines collapse when other processes run), and
writing the JSON + Markdown results."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from runtime import REPO


def plugin_facts() -> dict[str, Any]:
    """runtime_bench's `plugin` object, from what the running plugin reports."""
    import torch_pjrt

    info = torch_pjrt.runtime.info()
    xla_version = info["attributes"].get("xla_version")
    return {
        "file": Path(info["plugin_path"]).name,
        "pjrt_api_version": ".".join(map(str, info["pjrt_api_version"])),
        "xla_version": None if xla_version is None else str(xla_version),
        "platform_name": info["platform_name"],
    }


def system_busy_s() -> float:
    """CPU seconds all processes of the machine have used (Linux); 0.0 elsewhere."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def wait_for_quiet(limit_s: float, threshold_cores: float = 0.25) -> float:
    """Waits, up to limit_s, for a second in which other processes use under
    threshold_cores; returns the load of the last second measured, in cores."""
    deadline = time.monotonic() + limit_s
    while True:
        busy = system_busy_s()
        time.sleep(1.0)
        load = system_busy_s() - busy  # this process sleeps: all of it is others'
        if load < threshold_cores or time.monotonic() >= deadline:
            return round(load, 2)


def write_results(record: dict[str, Any], table: str, out_dir: Path, stem: str) -> None:
    """Writes <stem>.json and <stem>.md and says where, relative to the repo."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    json_path.write_text(json.dumps(record, indent=2) + "\n")
    md_path.write_text(table)
    for path in (json_path, md_path):
        shown = path.resolve().relative_to(REPO) if path.resolve().is_relative_to(REPO) else path
        print(f"wrote {shown}")
