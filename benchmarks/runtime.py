"""Runs the C++ runtime benchmark and records its results with machine facts.

Builds nothing: build runtime_bench first (it is part of the C++ test build),

    cmake -S . -B build/cpp -G Ninja && ninja -C build/cpp runtime_bench
    python benchmarks/runtime.py

then find benchmarks/results/runtime-<date>-<machine>.{json,md}. The plugin is
the one TORCH_PJRT_PLUGIN selects (or --plugin), resolved by the same code the
package uses. The files hold no host name and no absolute path, so they can be
committed and compared across machines.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_BINARY = REPO / "build" / "cpp" / "benchmarks" / "cpp" / "runtime_bench"
DEFAULT_OUT = REPO / "benchmarks" / "results"
PLUGIN_PATHS = REPO / "python" / "torch_pjrt" / "plugin_paths.py"
MACHINE = REPO / "python" / "torch_pjrt" / "bench" / "machine.py"


def _load(name: str, path: Path):
    """A torch-free module of the package, loaded by path (importing the
    package would import torch)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


_machine = _load("_torch_pjrt_machine", MACHINE)
cpu_model, memory_gib = _machine.cpu_model, _machine.memory_gib


def load_plugin_paths():
    return _load("_torch_pjrt_plugin_paths", PLUGIN_PATHS)


def run_benchmark(binary: Path, plugin: Path, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="torch_pjrt_bench_") as scratch:
        proc = subprocess.run(
            [str(binary), str(plugin), scratch],
            capture_output=True,
            text=True,
            check=False,  # the exit code is checked below, with stderr in the message
            timeout=timeout,
        )
    if proc.returncode != 0:
        # The plugin logs INFO lines on stderr; only a failure makes them worth showing.
        tail = "\n".join(proc.stderr.splitlines()[-20:])
        raise SystemExit(f"{binary.name} failed with exit code {proc.returncode}:\n{tail}")
    return json.loads(proc.stdout)


def machine_facts(results: dict) -> dict:
    plugin = results.get("plugin", {})
    return {
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": memory_gib(),
        # platform.platform() is kernel, architecture and libc: no host name.
        "os": platform.platform(),
        "python": platform.python_version(),
        "plugin": plugin.get("file"),
        "pjrt_api_version": plugin.get("pjrt_api_version"),
        "xla_version": plugin.get("xla_version"),
    }


def machine_tag(machine: dict, platform_name: str | None) -> str:
    return _machine.machine_tag(dict(machine, platform_name=platform_name))


def fmt(value, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def spread(d: dict) -> str:
    return f"{fmt(d['median'])} [{fmt(d['p10'])}, {fmt(d['p90'])}]"


def joined(*values) -> str:
    return " / ".join(fmt(v) for v in values)


def markdown(results: dict, machine: dict, date: str) -> str:
    launch, compile_, transfer = results["launch"], results["compile"], results["transfer"]
    # Ratios first: they travel between machines better than absolute times.
    rows = [
        ("Compile: cold / memory hit", f"{fmt(compile_['cold_over_memory_hit'])}x"),
        ("Compile: cold / disk hit", f"{fmt(compile_['cold_over_disk_hit'])}x"),
    ]
    for label, t in transfer.items():
        rows += [
            (f"H2D {label}: transfer / memcpy", f"{fmt(t['host_to_device_over_memcpy'])}x"),
            (f"D2H {label}: transfer / memcpy", f"{fmt(t['device_to_host_over_memcpy'])}x"),
            # The plugin copies into memory it just allocated; the kernel maps
            # those pages on first touch, which a memcpy into reused memory never pays.
            (
                f"H2D {label}: transfer / memcpy into a new allocation",
                f"{fmt(t['host_to_device_over_memcpy_new_allocation'])}x",
            ),
        ]
    done = f"{launch['ready_on_return_fraction']:.0%}"
    rows += [
        ("Launch + await, µs: median [p10, p90]", spread(launch["execute_await_us"])),
        (
            "Launch, enqueue only, µs: median [p10, p90]",
            f"{spread(launch['enqueue_only_us'])}; already done on return: {done}",
        ),
    ]
    for label, t in transfer.items():
        speeds = (t["host_to_device_gb_per_s"], t["device_to_host_gb_per_s"], t["memcpy_gb_per_s"])
        rows.append((f"{label} GB/s: H2D / D2H / memcpy", joined(*speeds)))
    times = (compile_["cold_ms"], compile_["memory_hit_ms"], compile_["disk_hit_ms"])
    rows.append(("Compile ms: cold / memory hit / disk hit", joined(*times)))

    header = (
        f"# Runtime benchmark, {date}\n\n"
        f"{machine['cpu_model']}, {machine['cores']} cores, {machine['memory_gib']} GiB, "
        f"{machine['os']}; plugin {machine['plugin']} (PJRT C API {machine['pjrt_api_version']}). "
        f"Launch: {launch['program']}, {launch['execute_await_us']['runs']} runs; "
        f"compile: {compile_['program']}, median of {compile_['repeats']} programs.\n\n"
    )
    table = ["| Metric | Value |", "| --- | --- |"]
    table += [f"| {name} | {value} |" for name, value in rows]
    return header + "\n".join(table) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", type=Path, default=DEFAULT_BINARY, help="runtime_bench to run")
    parser.add_argument(
        "--plugin",
        default=os.environ.get("TORCH_PJRT_PLUGIN"),
        help="cpu, cuda, tpu or a plugin path (default: TORCH_PJRT_PLUGIN, else automatic)",
    )
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--timeout", type=float, default=600, help="seconds before giving up")
    args = parser.parse_args()

    binary = args.binary if args.binary.is_absolute() else Path.cwd() / args.binary
    if not binary.is_file():
        raise SystemExit(f"no benchmark binary at {binary}: build the runtime_bench target first")
    plugin_paths = load_plugin_paths()
    try:
        plugin = plugin_paths.resolve(args.plugin).path
    except plugin_paths.PluginNotFoundError as error:
        raise SystemExit(str(error)) from None

    results = run_benchmark(binary, plugin, args.timeout)
    machine = machine_facts(results)
    date = datetime.date.today().isoformat()
    stem = f"runtime-{date}-{machine_tag(machine, results['plugin'].get('platform_name'))}"
    args.out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = args.out_dir / f"{stem}.json", args.out_dir / f"{stem}.md"
    record = {"date": date, "machine": machine, **results}
    json_path.write_text(json.dumps(record, indent=2) + "\n")
    table = markdown(results, machine, date)
    md_path.write_text(table)
    print(table)
    print(f"wrote {json_path}\nwrote {md_path}")


if __name__ == "__main__":
    main()
