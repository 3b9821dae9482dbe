"""What machine a benchmark ran on, without a host name. Imports nothing
but the standard library, so torch-free scripts load it by path."""

from __future__ import annotations

import platform
import re
from pathlib import Path
from typing import Any, Optional


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_gib() -> Optional[float]:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)  # the value is in KiB
    except OSError:
        pass
    return None


def machine_tag(facts: dict[str, Any]) -> str:
    """'intel-xeon-processor-2c' from the CPU model and core count; a plugin
    other than the CPU one is appended, so a GPU run does not overwrite it."""
    model = re.sub(r"\((r|tm)\)|\bcpu\b|@.*$", " ", facts["cpu_model"].lower())
    slug = re.sub(r"[^a-z0-9]+", "-", model).strip("-") or "unknown-cpu"
    tag = f"{slug}-{facts['cores']}c"
    platform_name = facts.get("platform_name")
    if platform_name and platform_name != "cpu":
        tag += "-" + re.sub(r"[^a-z0-9]+", "-", str(platform_name).lower())
    return tag
