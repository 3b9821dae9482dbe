"""`make demo`: what torch-pjrt does on this machine, end to end.

1. The runtime: load the PJRT plugin, list its devices, compile a StableHLO
   program (a small MLP layer), run it, check it against CPU PyTorch.
2. The device: the same kind of model written in plain PyTorch, moved with
   `.to("tpu")`, run in strict eager mode and checked against CPU PyTorch,
   with timings, compilations and CPU fallbacks.
3. Training: a small CNN trained for 20 steps on the device and on the CPU
   from the same weights, losses compared step by step.
"""

from __future__ import annotations

import statistics
import time

import torch

import torch_pjrt
from torch_pjrt import runtime as rt

BATCH, IN, OUT = 64, 256, 128

MLP_LAYER = f"""
module @demo_mlp_layer {{
  func.func public @main(%x: tensor<{BATCH}x{IN}xf32>, %w: tensor<{IN}x{OUT}xf32>,
                         %b: tensor<{OUT}xf32>) -> tensor<{BATCH}x{OUT}xf32> {{
    %0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0]
        : (tensor<{BATCH}x{IN}xf32>, tensor<{IN}x{OUT}xf32>) -> tensor<{BATCH}x{OUT}xf32>
    %1 = stablehlo.broadcast_in_dim %b, dims = [1]
        : (tensor<{OUT}xf32>) -> tensor<{BATCH}x{OUT}xf32>
    %2 = stablehlo.add %0, %1 : tensor<{BATCH}x{OUT}xf32>
    %3 = stablehlo.tanh %2 : tensor<{BATCH}x{OUT}xf32>
    return %3 : tensor<{BATCH}x{OUT}xf32>
  }}
}}
"""


def _median_us(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> int:
    start = time.perf_counter()
    info = rt.info()
    load_s = time.perf_counter() - start
    api = ".".join(map(str, info["pjrt_api_version"]))
    attrs = info["attributes"]
    print(f"plugin      {info['plugin_name']} ({info['plugin_reason']})")
    print(f"            {info['plugin_path'].rsplit('/', 1)[-1]}, PJRT C API {api}, "
          f"xla_version {attrs.get('xla_version')}, StableHLO "
          f"{'.'.join(map(str, attrs.get('stablehlo_minimum_version', [])))}.."
          f"{'.'.join(map(str, attrs.get('stablehlo_current_version', [])))}")
    print(f"platform    {info['platform_name']} {info['platform_version']}; "
          f"loaded in {load_s * 1e3:.0f} ms")
    for index, device in enumerate(info["devices"]):
        print(f"device {index}    {device['debug_string']} (kind {device['kind']}, id {device['id']})")

    torch.manual_seed(0)
    x, w, b = torch.randn(BATCH, IN), torch.randn(IN, OUT) / IN**0.5, torch.randn(OUT)
    expected = torch.tanh(x @ w + b)

    compiled = rt.compile_with_source(MLP_LAYER)
    again = rt.compile_with_source(MLP_LAYER)
    args = [rt.to_device(t) for t in (x, w, b)]
    (out,) = compiled.executable(args)
    result = out.to_tensor()
    torch.testing.assert_close(result, expected, rtol=1e-5, atol=1e-5)
    max_err = (result - expected).abs().max().item()
    print(f"\nprogram     tanh(x @ w + b), x {BATCH}x{IN}, w {IN}x{OUT}: matches CPU PyTorch "
          f"(max abs error {max_err:.2e})")

    def device_step():
        (y,) = compiled.executable(args)
        y.block_until_ready()

    runs = 200
    device_us = _median_us(device_step, runs)
    cpu_us = _median_us(lambda: torch.tanh(x @ w + b), runs)
    round_trip_us = _median_us(lambda: compiled.executable([rt.to_device(t) for t in (x, w, b)])[0]
                               .to_tensor(), runs)
    print(f"\n{'timing':34} {'value':>12}")
    print(f"{'compile (' + compiled.source + ')':34} {compiled.seconds * 1e3:10.2f} ms")
    print(f"{'compile again (' + again.source + ')':34} {again.seconds * 1e6:10.1f} us")
    print(f"{'run on device, median':34} {device_us:10.1f} us")
    print(f"{'copy in + run + copy out, median':34} {round_trip_us:10.1f} us")
    print(f"{'CPU PyTorch eager, median':34} {cpu_us:10.1f} us")
    print(f"{'device / CPU PyTorch':34} {device_us / cpu_us:10.2f} x")
    m = torch_pjrt.metrics()
    print(f"\nmetrics     compilations {m['compilations']}, memory hits {m['cache_hits_memory']}, "
          f"disk hits {m['cache_hits_disk']}, executions {m['executions']}")
    return device_demo()


def device_demo() -> int:
    name = torch_pjrt.settings().device_name
    device_module = getattr(torch, name)
    print(f"\n--- PyTorch on the {name} device ({device_module.get_device_name()}, "
          f"{torch_pjrt.settings().eager} eager) ---")
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(IN, 256), torch.nn.Tanh(), torch.nn.Linear(256, OUT), torch.nn.Sigmoid()
    )
    x = torch.randn(BATCH, IN)
    with torch.no_grad():
        expected = model(x)
        on_device = model.to(name)
        xd = x.to(name)
        got = on_device(xd)
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-4)
        print(f"model       Linear-Tanh-Linear-Sigmoid, batch {BATCH}: matches CPU PyTorch "
              f"(max abs error {(got.cpu() - expected).abs().max().item():.2e})")

        def device_forward():
            on_device(xd)
            device_module.synchronize()

        device_forward()
        torch_pjrt.reset_metrics()
        runs = 50
        device_us = _median_us(device_forward, runs)
        m = torch_pjrt.metrics()
        cpu_model = model.to("cpu")
        cpu_us = _median_us(lambda: cpu_model(x), runs)
    print(f"{'forward on device, median':34} {device_us:10.1f} us")
    print(f"{'forward CPU PyTorch eager, median':34} {cpu_us:10.1f} us")
    print(f"{'device / CPU PyTorch':34} {device_us / cpu_us:10.2f} x")
    print(f"after warm-up: {m['compilations'] + m['cache_hits_disk']} compilations, "
          f"{m['executions'] // runs} programs per forward, CPU fallbacks: "
          f"{m['fallback_ops'] or 'none'}")
    return training_demo()


def _train(device: str, steps: int) -> tuple[list[float], list[float]]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10),
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 3, 16, 16, generator=g).to(device)
    y = torch.randint(0, 10, (32,), generator=g).to(device)
    losses, times = [], []
    for _ in range(steps):
        start = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())  # waits for the step
        times.append(time.perf_counter() - start)
    return losses, times


def training_demo() -> int:
    name = torch_pjrt.settings().device_name
    steps = 20
    print(f"\n--- training a small CNN on {name} (AdamW, cosine schedule, {steps} steps) ---")
    cpu_losses, cpu_times = _train("cpu", steps)
    torch_pjrt.reset_metrics()
    dev_losses, dev_times = _train(name, steps)
    m = torch_pjrt.metrics()
    worst = max(abs(a - b) for a, b in zip(cpu_losses, dev_losses))
    torch.testing.assert_close(dev_losses, cpu_losses, rtol=1e-3, atol=1e-4)
    print(f"loss        {dev_losses[0]:.4f} -> {dev_losses[-1]:.4f} on {name}, "
          f"{cpu_losses[0]:.4f} -> {cpu_losses[-1]:.4f} on CPU (largest step difference {worst:.1e})")
    dev_step = statistics.median(dev_times[2:]) * 1e3
    cpu_step = statistics.median(cpu_times[2:]) * 1e3
    print(f"{'step time on device, median':34} {dev_step:10.2f} ms")
    print(f"{'step time CPU PyTorch, median':34} {cpu_step:10.2f} ms")
    print(f"{'device / CPU PyTorch':34} {dev_step / cpu_step:10.2f} x")
    print(f"{'first step (compiles) on device':34} {dev_times[0] * 1e3:10.0f} ms")
    print(f"programs compiled {m['compilations']} (+{m['cache_hits_disk']} from the disk cache), "
          f"CPU fallbacks: {m['fallback_ops'] or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
