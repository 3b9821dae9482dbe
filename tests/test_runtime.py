"""The PJRT runtime as Python sees it: plugin, devices, programs, buffers,
errors and the compile cache, checked against CPU PyTorch."""

from __future__ import annotations

import json

import pytest
import torch

import torch_pjrt
from torch_pjrt import runtime as rt

ADD = """
module @add {
  func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.add %a, %b : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
"""

MLP_LAYER = """
module @mlp_layer {
  func.func public @main(%x: tensor<8x16xf32>, %w: tensor<16x4xf32>, %b: tensor<8x4xf32>)
      -> tensor<8x4xf32> {
    %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0]
        : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
    %1 = stablehlo.add %0, %b : tensor<8x4xf32>
    %2 = stablehlo.tanh %1 : tensor<8x4xf32>
    return %2 : tensor<8x4xf32>
  }
}
"""

ALL_DTYPES = [
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.uint16, torch.uint32, torch.uint64, torch.float16, torch.bfloat16, torch.float32,
    torch.float64, torch.complex64, torch.complex128, torch.float8_e5m2, torch.float8_e4m3fn,
]


def test_info_describes_the_cpu_plugin():
    info = rt.info()
    assert info["platform_name"] == "cpu"
    assert info["plugin_name"] == "cpu"
    assert info["pjrt_api_version"][0] == 0
    assert len(info["attributes"]["stablehlo_current_version"]) == 3
    assert info["devices"][0]["kind"] == "cpu"
    assert info["cache_dir"] == torch_pjrt.settings().cache_dir


def test_program_matches_cpu_pytorch():
    torch.manual_seed(0)
    x, w, b = torch.randn(8, 16), torch.randn(16, 4), torch.randn(8, 4)
    exe = rt.compile(MLP_LAYER)
    (out,) = exe([rt.to_device(x), rt.to_device(w), rt.to_device(b)])
    torch.testing.assert_close(out.to_tensor(), torch.tanh(x @ w + b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_round_trip_every_dtype(dtype):
    source = (torch.arange(24, dtype=torch.float64).reshape(2, 3, 4) - 7).to(dtype)
    array = rt.to_device(source)
    assert array.dtype == dtype
    assert array.shape == [2, 3, 4]
    back = array.to_tensor()
    assert back.dtype == dtype
    assert torch.equal(back.view(torch.uint8), source.view(torch.uint8))


def test_non_contiguous_tensor_is_copied_densely():
    source = torch.arange(12.0).reshape(3, 4).t()
    assert torch.equal(rt.to_device(source).to_tensor(), source)


def test_malformed_program_raises_pjrt_error():
    with pytest.raises(torch_pjrt.PjrtError) as info:
        rt.compile("module { this is not stablehlo")
    assert info.value.call == "PJRT_Client_Compile"
    assert isinstance(info.value, RuntimeError)


def test_wrong_argument_dtype_and_count_raise():
    exe = rt.compile(ADD)
    good = rt.to_device(torch.ones(4))
    with pytest.raises(torch_pjrt.PjrtError, match=r"must be f32\[4\], got i32\[4\]") as info:
        exe([rt.to_device(torch.ones(4, dtype=torch.int32)), good])
    assert info.value.code == "INVALID_ARGUMENT"
    with pytest.raises(torch_pjrt.PjrtError, match="takes 2 argument"):
        exe([good])


def test_out_of_range_device_raises():
    with pytest.raises(torch_pjrt.PjrtError, match="device index 7") as info:
        rt.to_device(torch.ones(2), device=7)
    assert info.value.code == "OUT_OF_RANGE"


def test_unsupported_dtype_raises_type_error():
    with pytest.raises(TypeError, match="has no PJRT element type"):
        rt.to_device(torch.zeros(2, dtype=torch.float8_e4m3fnuz))


def test_metrics_count_compiles_hits_executions_and_bytes():
    program = ADD.replace("@add", "@metrics_add")
    torch_pjrt.reset_metrics()
    exe = rt.compile(program)
    assert rt.compile_with_source(program).source == "memory"
    a = rt.to_device(torch.ones(4))
    for _ in range(3):
        (out,) = exe([a, a])
    out.to_tensor()
    m = torch_pjrt.metrics()
    assert m["compilations"] + m["cache_hits_disk"] == 1
    assert m["cache_hits_memory"] == 1
    assert m["executions"] == 3
    assert m["host_to_device_bytes"] == 16
    assert m["device_to_host_bytes"] == 16
    assert m["fallback_ops"] == {} and m["recompile_reasons"] == {}
    torch_pjrt.reset_metrics()
    assert torch_pjrt.metrics()["executions"] == 0


def test_new_process_loads_from_disk_cache(python_in_subprocess, tmp_path):
    code = f"""
        import json, torch_pjrt.runtime as rt
        result = rt.compile_with_source({ADD!r})
        print(json.dumps(result.source))
    """
    env = {"TORCH_PJRT_CACHE_DIR": str(tmp_path / "cache")}
    first = python_in_subprocess(code, env)
    second = python_in_subprocess(code, env)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == "compiled"
    assert json.loads(second.stdout) == "disk"


def test_compiler_flags_are_part_of_the_cache_key(python_in_subprocess, tmp_path):
    """XLA_FLAGS change what the plugin compiles: an executable cached under
    other flags is not loaded."""
    code = f"""
        import json, torch_pjrt.runtime as rt
        print(json.dumps(rt.compile_with_source({ADD!r}).source))
    """
    cache = {"TORCH_PJRT_CACHE_DIR": str(tmp_path / "cache"), "XLA_FLAGS": ""}
    flagged = dict(cache, XLA_FLAGS="--xla_cpu_enable_fast_math=false")
    runs = [python_in_subprocess(code, env) for env in (cache, flagged, flagged, cache)]
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    assert [json.loads(r.stdout) for r in runs] == ["compiled", "compiled", "disk", "disk"]


def test_empty_cache_dir_disables_disk_cache(python_in_subprocess):
    code = f"""
        import torch_pjrt.runtime as rt
        assert rt.info()["cache_dir"] == ""
        print(rt.compile_with_source({ADD!r}).source)
    """
    result = python_in_subprocess(code, {"TORCH_PJRT_CACHE_DIR": ""})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "compiled"


def test_two_cpu_devices(python_in_subprocess):
    code = f"""
        import torch, torch_pjrt.runtime as rt
        assert rt.device_count() == 2
        a = rt.to_device(torch.arange(4.), device=1)
        exe = rt.compile({ADD!r})
        (out,) = exe([a, a], device=1)
        assert out.device == 1
        print(out.to_tensor().tolist())
    """
    result = python_in_subprocess(code, {"TORCH_PJRT_CPU_DEVICES": "2"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[0.0, 2.0, 4.0, 6.0]"


@pytest.mark.parametrize(
    "env, message",
    [
        ({"TORCH_PJRT_EAGER": "lazy"}, "TORCH_PJRT_EAGER='lazy' is not one of strict, debug, fused"),
        ({"TORCH_PJRT_FALLBACK": "maybe"}, "TORCH_PJRT_FALLBACK"),
        ({"TORCH_PJRT_CPU_DEVICES": "zero"}, "TORCH_PJRT_CPU_DEVICES='zero' is not an integer"),
        ({"TORCH_PJRT_DEVICE_NAME": "cuda"}, "TORCH_PJRT_DEVICE_NAME='cuda'"),
    ],
)
def test_bad_settings_are_value_errors(python_in_subprocess, env, message):
    result = python_in_subprocess("import torch_pjrt; torch_pjrt.settings()", env)
    assert result.returncode != 0
    assert "ValueError" in result.stderr and message in result.stderr


@pytest.mark.parametrize(
    "plugin, message",
    [
        ("/nonexistent/plugin.so", "neither cpu, cuda, tpu nor an existing plugin file"),
        ("tpu", "no tpu PJRT plugin is installed"),
    ],
)
def test_missing_plugin_is_a_clear_error(python_in_subprocess, plugin, message):
    result = python_in_subprocess("import torch_pjrt.runtime as rt; rt.info()",
                                  {"TORCH_PJRT_PLUGIN": plugin})
    assert result.returncode != 0
    assert "PluginNotFoundError" in result.stderr and message in result.stderr
    assert "Traceback" in result.stderr  # a Python exception, not an abort


def test_file_that_is_not_a_plugin_is_refused(python_in_subprocess, tmp_path):
    fake = tmp_path / "fake_plugin.so"
    fake.write_bytes(b"not an ELF file")
    result = python_in_subprocess("import torch_pjrt.runtime as rt; rt.info()",
                                  {"TORCH_PJRT_PLUGIN": str(fake)})
    assert result.returncode != 0
    assert "PjrtError" in result.stderr and "cannot load" in result.stderr


def test_unusable_cache_dir_is_a_clear_error(python_in_subprocess, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = python_in_subprocess("import torch_pjrt.runtime as rt; rt.info()",
                                  {"TORCH_PJRT_CACHE_DIR": str(blocker / "cache")})
    assert result.returncode != 0
    assert "PjrtError" in result.stderr and "TORCH_PJRT_CACHE_DIR" in result.stderr


def test_timeline_measures_the_time_between_programs():
    """Within runtime.timeline(), each execution is recorded: the host
    sleeping between two ops is time the device waited between programs."""
    import time

    name = torch_pjrt.settings().device_name
    x = torch.ones(64, device=name)
    (x + 1).cpu()  # compiled and warm before the measured block
    torch_pjrt.reset_metrics()
    (x * 3).cpu()
    assert torch_pjrt.metrics()["timeline_programs"] == 0  # off outside the block
    torch_pjrt.reset_metrics()
    with rt.timeline():
        for _ in range(4):
            x + 1
            getattr(torch, name).synchronize()
            time.sleep(0.02)
    deadline = time.time() + 5
    while torch_pjrt.metrics()["timeline_programs"] < 4 and time.time() < deadline:
        time.sleep(0.01)  # a completion callback may still be on its way
    m = torch_pjrt.metrics()
    assert m["timeline_programs"] == m["executions"] == 4
    assert m["device_idle_seconds"] >= 3 * 0.015  # three gaps of a 20 ms sleep
    assert m["device_busy_seconds"] > 0
