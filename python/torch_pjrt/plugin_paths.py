"""Where the PJRT plugins are, and which one TORCH_PJRT_PLUGIN selects.

This module imports nothing of torch_pjrt's extension, so the build can run it
as a script to tell the C++ tests which plugin to load:

    python python/torch_pjrt/plugin_paths.py cpu
"""

from __future__ import annotations

import glob
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

# name -> (python package holding the library, file name inside it, pip hint)
_KNOWN = {
    "cpu": [("lammps_jax_pjrt_cpu", "pjrt_c_api_cpu_plugin.so", "lammps-jax-pjrt-cpu==0.11.2")],
    "cuda": [
        ("jax_plugins.xla_cuda13", "xla_cuda_plugin.so", "jax-cuda13-pjrt"),
        ("jax_plugins.xla_cuda12", "xla_cuda_plugin.so", "jax-cuda12-pjrt"),
    ],
    "tpu": [("libtpu", "libtpu.so", "libtpu")],
}


class PluginNotFoundError(RuntimeError):
    """TORCH_PJRT_PLUGIN names a plugin that is not installed or does not exist."""


@dataclass(frozen=True)
class PluginChoice:
    name: str  # cpu, cuda, tpu, or "path"
    path: Path
    reason: str  # why this plugin was chosen, for device properties and errors


def _package_dirs(package: str) -> list[Path]:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return []
    if spec is None or spec.submodule_search_locations is None:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def find_plugin(name: str) -> Path | None:
    """The installed library of plugin `name` (cpu, cuda, tpu), or None."""
    if name == "tpu" and os.environ.get("TPU_LIBRARY_PATH"):
        path = Path(os.environ["TPU_LIBRARY_PATH"])
        if path.is_file():
            return path
    for package, filename, _ in _KNOWN[name]:
        for folder in _package_dirs(package):
            if (folder / filename).is_file():
                return folder / filename
    return None


def _tpu_chips_present() -> bool:
    # Google's PCI vendor id; TPU VMs also expose /dev/accel* or /dev/vfio.
    for vendor in glob.glob("/sys/bus/pci/devices/*/vendor"):
        try:
            if Path(vendor).read_text().strip() == "0x1ae0":
                return True
        except OSError:
            continue
    return bool(glob.glob("/dev/accel*"))


def _nvidia_gpu_present() -> bool:
    return bool(glob.glob("/dev/nvidia[0-9]*")) or bool(glob.glob("/proc/driver/nvidia/gpus/*"))


def resolve(setting: str | None) -> PluginChoice:
    """Applies TORCH_PJRT_PLUGIN: cpu, cuda, tpu, a path, or empty for automatic."""
    setting = (setting or "").strip()
    if not setting:
        tpu = find_plugin("tpu")
        if tpu is not None and _tpu_chips_present():
            return PluginChoice("tpu", tpu, "automatic: libtpu is installed and TPU chips are present")
        cuda = find_plugin("cuda")
        if cuda is not None and _nvidia_gpu_present():
            return PluginChoice("cuda", cuda, "automatic: a CUDA plugin is installed and a GPU is present")
        cpu = find_plugin("cpu")
        if cpu is None:
            raise PluginNotFoundError(
                "no PJRT plugin found: install the XLA CPU plugin "
                f"(pip install {_KNOWN['cpu'][0][2]}) or set TORCH_PJRT_PLUGIN to a plugin path"
            )
        return PluginChoice("cpu", cpu, "automatic: no TPU or GPU plugin with hardware; XLA CPU plugin")
    if setting in _KNOWN:
        path = find_plugin(setting)
        if path is None:
            hints = " or ".join(pip for _, _, pip in _KNOWN[setting])
            raise PluginNotFoundError(
                f"TORCH_PJRT_PLUGIN={setting}, but no {setting} PJRT plugin is installed "
                f"(pip install {hints})"
            )
        return PluginChoice(setting, path, f"TORCH_PJRT_PLUGIN={setting}")
    path = Path(setting).expanduser()
    if not path.is_file():
        raise PluginNotFoundError(
            f"TORCH_PJRT_PLUGIN={setting!r} is neither cpu, cuda, tpu nor an existing plugin file"
        )
    return PluginChoice("path", path.resolve(), f"TORCH_PJRT_PLUGIN={setting}")


if __name__ == "__main__":
    try:
        print(resolve(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("TORCH_PJRT_PLUGIN")).path)
    except PluginNotFoundError as error:
        print(error, file=sys.stderr)
        raise SystemExit(1) from None
